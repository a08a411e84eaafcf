package luksutil

import (
	"fmt"
	"io"
	"sync"
)

// MemDevice is an in-memory Device of fixed size, for tests and fuzzing.
type MemDevice struct {
	mu  sync.Mutex
	Buf []byte
}

// NewMemDevice returns a zeroed device of n bytes, or one holding b.
func NewMemDevice(n int, b []byte) *MemDevice {
	if b != nil {
		return &MemDevice{Buf: b}
	}
	return &MemDevice{Buf: make([]byte, n)}
}

// ReadAt implements io.ReaderAt.
func (m *MemDevice) ReadAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if off < 0 || off > int64(len(m.Buf)) {
		return 0, io.EOF
	}
	n := copy(p, m.Buf[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// WriteAt implements io.WriterAt; it does not grow the device.
func (m *MemDevice) WriteAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if off < 0 || off+int64(len(p)) > int64(len(m.Buf)) {
		return 0, fmt.Errorf("write of %d bytes at %d beyond the %d-byte device", len(p), off, len(m.Buf))
	}
	return copy(m.Buf[off:], p), nil
}

// Sync does nothing.
func (m *MemDevice) Sync() error { return nil }

// Size returns the device size.
func (m *MemDevice) Size() (int64, error) { return int64(len(m.Buf)), nil }
