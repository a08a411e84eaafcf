//go:build !unix

package nbd

import "syscall"

func (c *conn) rawConn() syscall.RawConn { return nil }

// headerReady sees only the read buffer where the socket cannot be peeked.
func (c *conn) headerReady() bool { return c.br.Buffered() >= requestHeaderLen }
