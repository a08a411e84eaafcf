//go:build linux

package kernel

import (
	"bufio"
	"fmt"
	"io"
	"path"
	"strings"
)

// cpioWriter writes the "newc" (SVR4, no CRC) cpio format that the kernel
// unpacks into its initramfs. Parent directories are emitted on demand, so
// callers only add files and symlinks.
type cpioWriter struct {
	w    *bufio.Writer
	n    int64
	ino  uint32
	dirs map[string]bool
	err  error
}

func newCPIO(w io.Writer) *cpioWriter {
	return &cpioWriter{w: bufio.NewWriterSize(w, 1<<20), ino: 1000, dirs: map[string]bool{"": true, ".": true, "/": true}}
}

const (
	cpioDir     = 0o040000
	cpioFile    = 0o100000
	cpioSymlink = 0o120000
)

func (c *cpioWriter) write(p []byte) {
	if c.err != nil {
		return
	}
	var n int
	n, c.err = c.w.Write(p)
	c.n += int64(n)
}

func (c *cpioWriter) pad() {
	if r := c.n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

func (c *cpioWriter) entry(name string, mode uint32, data []byte) {
	name = strings.TrimPrefix(path.Clean("/"+name), "/")
	c.ino++
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write([]byte(name))
	c.write([]byte{0})
	c.pad()
	c.write(data)
	c.pad()
}

// Mkdir adds a directory and its parents.
func (c *cpioWriter) Mkdir(dir string) {
	dir = path.Clean("/" + dir)
	if c.dirs[dir] {
		return
	}
	c.Mkdir(path.Dir(dir))
	c.dirs[dir] = true
	c.entry(dir, cpioDir|0o755, nil)
}

// File adds a regular file with the given permission bits.
func (c *cpioWriter) File(name string, perm uint32, data []byte) {
	c.Mkdir(path.Dir(path.Clean("/" + name)))
	c.entry(name, cpioFile|perm&0o7777, data)
}

// Symlink adds a symbolic link name → target.
func (c *cpioWriter) Symlink(name, target string) {
	c.Mkdir(path.Dir(path.Clean("/" + name)))
	c.entry(name, cpioSymlink|0o777, []byte(target))
}

// Close writes the trailer. The kernel accepts several archives
// concatenated, so a cached base archive and a per-boot one can simply be
// appended.
func (c *cpioWriter) Close() error {
	c.entry("TRAILER!!!", 0, nil)
	if c.err != nil {
		return c.err
	}
	return c.w.Flush()
}
