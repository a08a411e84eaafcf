package ext4

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sync"
)

// maxRun caps one read from the device: large enough that a big file
// streams in few device reads (an extent is decrypted or fetched in one
// go), small enough that a single call does not hold megabytes of a
// lower layer's buffers.
const maxRun = 4 << 20

// streamSize is the buffer of WriteTo: 1 MiB, as fsys.Copy's (see there:
// a larger buffer falls out of the CPU caches and makes a decrypting
// device below slower, not faster).
const streamSize = 1 << 20

// contents reads the data of one inode: inline bytes, or blocks through
// its mapper. It is safe for concurrent use.
type contents struct {
	f      *FS
	in     *inode
	inline []byte // inline data, when the inode has it

	mu sync.Mutex
	m  *mapper
	// The last block read for a read smaller than a block, so reading a
	// file a few bytes at a time costs one device read per block, not
	// one per call.
	cacheBlk   uint64
	cache      []byte
	cacheValid bool
}

func (f *FS) contents(in *inode) (*contents, error) {
	if in.flags&flagEncrypt != 0 {
		return nil, fmt.Errorf("%w: inode %d is encrypted (fscrypt)", ErrUnsupported, in.ino)
	}
	c := &contents{f: f, in: in}
	if in.flags&flagInline != 0 {
		b, err := f.inlineData(in)
		if err != nil {
			return nil, err
		}
		c.inline = b
		return c, nil
	}
	c.m = newMapper(f, in)
	return c, nil
}

// readAt fills p from offset off of the inode's data, returning io.EOF
// when it reaches the end of the file.
func (c *contents) readAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("ext4: negative offset")
	}
	size := int64(c.in.size)
	if off >= size {
		return 0, io.EOF
	}
	want := len(p)
	if int64(want) > size-off {
		p = p[:size-off]
	}
	if c.in.flags&flagInline != 0 {
		n := 0
		if off < int64(len(c.inline)) {
			n = copy(p, c.inline[off:])
		}
		clear(p[n:]) // past the stored bytes, up to the size: zeros
		n = len(p)
		if n < want {
			return n, io.EOF
		}
		return n, nil
	}
	bs := c.f.bs
	n := 0
	for n < len(p) {
		pos := off + int64(n)
		lblk := uint64(pos / bs)
		in := pos % bs
		chunk := len(p) - n
		if chunk > maxRun {
			chunk = maxRun
		}
		blocks := (in + int64(chunk) + bs - 1) / bs
		c.mu.Lock()
		r, err := c.m.lookup(lblk, uint64(blocks))
		c.mu.Unlock()
		if err != nil {
			return n, err
		}
		if avail := int64(r.n)*bs - in; int64(chunk) > avail {
			chunk = int(avail)
		}
		dst := p[n : n+chunk]
		switch {
		case r.zero:
			clear(dst)
		case in+int64(chunk) < bs:
			if err := c.cachedBlock(lblk, r.phys); err != nil {
				return n, err
			}
			c.mu.Lock()
			copy(dst, c.cache[in:])
			c.mu.Unlock()
		default:
			if err := c.f.readAt(dst, int64(r.phys)*bs+in); err != nil {
				return n, err
			}
		}
		n += chunk
	}
	if n < want {
		return n, io.EOF
	}
	return n, nil
}

// cachedBlock makes c.cache hold logical block lblk, stored at phys.
func (c *contents) cachedBlock(lblk, phys uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cacheValid && c.cacheBlk == lblk {
		return nil
	}
	if c.cache == nil {
		c.cache = make([]byte, c.f.bs)
	}
	c.cacheValid = false
	if err := c.f.readAt(c.cache, int64(phys)*c.f.bs); err != nil {
		return err
	}
	c.cacheBlk, c.cacheValid = lblk, true
	return nil
}

// file is an open regular file, symlink or special file.
type file struct {
	name string
	c    *contents
	off  int64
}

var (
	_ io.ReaderAt    = (*file)(nil)
	_ io.Seeker      = (*file)(nil)
	_ io.WriterTo    = (*file)(nil)
	_ fs.ReadDirFile = (*dir)(nil)
)

func (fl *file) Stat() (fs.FileInfo, error) {
	return &fileInfo{name: path.Base(fl.name), in: fl.c.in}, nil
}
func (fl *file) Close() error { return nil }

func (fl *file) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, err := fl.c.readAt(p, fl.off)
	fl.off += int64(n)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, fl.wrap("read", err)
}

// ReadAt implements io.ReaderAt; it may be called concurrently.
func (fl *file) ReadAt(p []byte, off int64) (int, error) {
	n, err := fl.c.readAt(p, off)
	return n, fl.wrap("read", err)
}

func (fl *file) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += fl.off
	case io.SeekEnd:
		offset += int64(fl.c.in.size)
	default:
		return 0, &fs.PathError{Op: "seek", Path: fl.name, Err: fs.ErrInvalid}
	}
	if offset < 0 {
		return 0, &fs.PathError{Op: "seek", Path: fl.name, Err: fs.ErrInvalid}
	}
	fl.off = offset
	return offset, nil
}

// WriteTo streams the rest of the file to w through one buffer of at most
// streamSize bytes, so io.Copy issues device reads of 1 MiB of an extent
// instead of the 32 KiB its own buffer would give.
func (fl *file) WriteTo(w io.Writer) (int64, error) {
	rest := int64(fl.c.in.size) - fl.off
	if rest <= 0 {
		return 0, nil
	}
	buf := make([]byte, min(rest, streamSize))
	defer clear(buf) // it held the file's bytes
	var total int64
	for {
		n, err := fl.c.readAt(buf, fl.off)
		if n > 0 {
			fl.off += int64(n)
			m, werr := w.Write(buf[:n])
			total += int64(m)
			if werr != nil {
				return total, werr
			}
			if m < n {
				return total, io.ErrShortWrite
			}
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, fl.wrap("read", err)
		}
	}
}

func (fl *file) wrap(op string, err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	return &fs.PathError{Op: op, Path: fl.name, Err: err}
}
