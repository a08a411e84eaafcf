package nbd

import (
	"net"
	"strconv"

	"golang.org/x/sys/unix"
)

// unixPeer names the user at the other end of a Unix socket, so that local
// users each get their own share of the connection cap instead of one for
// the whole machine.
func unixPeer(c net.Conn) (string, bool) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return "", false
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return "", false
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return "", false
	}
	return "unix:uid=" + strconv.FormatUint(uint64(cred.Uid), 10), true
}
