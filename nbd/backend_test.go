package nbd

import (
	"io"
	"os"
	"sync"
	"sync/atomic"
)

// memBackend is an in-memory Backend: a []byte under a RWMutex.
type memBackend struct {
	mu      sync.RWMutex
	data    []byte
	bs      int
	flushes atomic.Int64
	writes  atomic.Int64
}

func newMem(size, bs int) *memBackend { return &memBackend{data: make([]byte, size), bs: bs} }

func (m *memBackend) ReadAt(p []byte, off int64) (int, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if off < 0 || off > int64(len(m.data)) {
		return 0, io.EOF
	}
	n := copy(p, m.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (m *memBackend) WriteAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes.Add(1)
	if off < 0 || off+int64(len(p)) > int64(len(m.data)) {
		return 0, io.ErrShortWrite
	}
	return copy(m.data[off:], p), nil
}

func (m *memBackend) Size() int64    { return int64(len(m.data)) }
func (m *memBackend) Flush() error   { m.flushes.Add(1); return nil }
func (m *memBackend) BlockSize() int { return m.bs }

func (m *memBackend) snapshot() []byte {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return append([]byte(nil), m.data...)
}

// discardMem adds Discard and WriteZeroes to memBackend.
type discardMem struct {
	*memBackend
	discards atomic.Int64
	zeroes   atomic.Int64
}

func (d *discardMem) Discard(off, length int64) error {
	d.discards.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(d.data[off : off+length])
	return nil
}

func (d *discardMem) WriteZeroes(off, length int64) error {
	d.zeroes.Add(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(d.data[off : off+length])
	return nil
}

// fileBackend exports a regular file.
type fileBackend struct {
	f    *os.File
	size int64
	bs   int
}

func newFileBackend(path string, size int64, bs int) (*fileBackend, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, err
	}
	return &fileBackend{f: f, size: size, bs: bs}, nil
}

func (b *fileBackend) ReadAt(p []byte, off int64) (int, error)  { return b.f.ReadAt(p, off) }
func (b *fileBackend) WriteAt(p []byte, off int64) (int, error) { return b.f.WriteAt(p, off) }
func (b *fileBackend) Size() int64                              { return b.size }
func (b *fileBackend) Flush() error                             { return b.f.Sync() }
func (b *fileBackend) BlockSize() int                           { return b.bs }
func (b *fileBackend) Close() error                             { return b.f.Close() }

// inPlaceMem adds WriteAtInPlace to memBackend; it scribbles over the
// buffer it was given, as an encrypting backend does.
type inPlaceMem struct {
	*memBackend
	inPlace atomic.Int64
}

func (m *inPlaceMem) WriteAtInPlace(p []byte, off int64) (int, error) {
	m.inPlace.Add(1)
	n, err := m.memBackend.WriteAt(p, off)
	for i := range p {
		p[i] ^= 0xa5
	}
	return n, err
}
