//go:build unix

package nbd

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// rawConn returns the connection's descriptor for peeking, or nil when
// there is none to peek at (TLS: its records hide the next header).
func (c *conn) rawConn() syscall.RawConn {
	if c.nc != c.raw {
		return nil
	}
	sc, ok := c.raw.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// headerReady reports whether the next request header can be read without
// waiting: in the read buffer, or on the socket (peeked, not consumed).
func (c *conn) headerReady() bool {
	have := c.br.Buffered()
	if have >= requestHeaderLen {
		return true
	}
	if c.rc == nil {
		return false
	}
	var p [requestHeaderLen]byte
	got := 0
	err := c.rc.Read(func(fd uintptr) bool {
		n, _, err := unix.Recvfrom(int(fd), p[:requestHeaderLen-have], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		if err == nil {
			got = n
		}
		return true // never wait: not ready is an answer
	})
	return err == nil && got >= requestHeaderLen-have
}
