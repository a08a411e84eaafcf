package blkcrypt

import (
	"context"
	"sync"
	"testing"

	"github.com/blkcrypt/blkcrypt/sector"
)

// memURIDev is an in-memory URI device that asks for a queue depth.
type memURIDev struct {
	mu    sync.Mutex
	data  []byte
	depth int
}

func (d *memURIDev) ReadAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return copy(p, d.data[off:]), nil
}

func (d *memURIDev) WriteAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return copy(d.data[off:], p), nil
}

func (d *memURIDev) Sync() error          { return nil }
func (d *memURIDev) Size() (int64, error) { return int64(len(d.data)), nil }
func (d *memURIDev) Close() error         { return nil }
func (d *memURIDev) QueueDepth() int      { return d.depth }

// TestVolumeQueueDepth: a Volume passes on the queue depth its device asks
// for, through Open of a URI and through NewVolume, and a file asks for
// none.
func TestVolumeQueueDepth(t *testing.T) {
	dev := &memURIDev{data: make([]byte, 1<<20), depth: 48}
	RegisterURIScheme("testdepth:", func(context.Context, string, bool) (URIDevice, error) { return dev, nil })
	key := make([]byte, 64)
	v, err := Open(context.Background(), "testdepth:x", OpenOptions{Type: TypePlain, VolumeKey: key, Plain: PlainOptions{KeySize: 64}})
	if err != nil {
		t.Fatal(err)
	}
	if d := v.QueueDepth(); d != 48 {
		t.Errorf("Volume over a URI device asking for 48: QueueDepth %d", d)
	}
	v.Close()
	c, err := sector.New("aes-xts-plain64", key, sector.Options{})
	if err != nil {
		t.Fatal(err)
	}
	direct, err := NewVolume(&memURIDev{data: make([]byte, 1<<20), depth: 7}, c, 0, 1<<20, false)
	if err != nil {
		t.Fatal(err)
	}
	if d := direct.QueueDepth(); d != 7 {
		t.Errorf("NewVolume over a device asking for 7: QueueDepth %d", d)
	}
	f := tempPlain(t, 1<<20, 512)
	if d := f.QueueDepth(); d != 0 {
		t.Errorf("Volume over a file: QueueDepth %d, want 0 (the server's default)", d)
	}
}
