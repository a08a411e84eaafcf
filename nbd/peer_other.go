//go:build !linux

package nbd

import "net"

// unixPeer is Linux-only (SO_PEERCRED); elsewhere every Unix-socket client
// shares one address.
func unixPeer(net.Conn) (string, bool) { return "", false }
