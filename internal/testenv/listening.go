package testenv

import (
	"os"
	"strings"
)

// UnixListening reports whether a socket bound to path accepts
// connections. A server's socket file appears at bind, before listen, so a
// test that waits for the file alone can connect in between and be refused
// (it happens on a loaded machine); connecting to check would be a client
// the server sees and logs. Linux's /proc/net/unix says which sockets
// listen (the __SO_ACCEPTCON flag) without touching them.
func UnixListening(path string) bool {
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		// Num RefCount Protocol Flags Type St Inode Path
		if len(f) == 8 && f[7] == path && f[3] == "00010000" {
			return true
		}
	}
	return false
}
