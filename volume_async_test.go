package blkcrypt

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/sector"
)

// asyncFile is a file Device with WriteAtAsync: each write completes on a
// goroutine of its own, once gate (if set) lets it, with fail (if set)
// instead of writing.
type asyncFile struct {
	*os.File
	gate    chan struct{}
	fail    error
	started atomic.Int64
}

func (a *asyncFile) WriteAtAsync(p []byte, off int64, done func(int, error)) {
	a.started.Add(1)
	go func() {
		if a.gate != nil {
			<-a.gate
		}
		if a.fail != nil {
			done(0, a.fail)
			return
		}
		done(a.File.WriteAt(p, off))
	}()
}

// asyncVolume makes a volume with a 64 KiB data offset over a zeroed file
// of size bytes plus the offset, through an asyncFile if async is set.
func asyncVolume(t *testing.T, key []byte, ss int, size int64, async bool) (*Volume, *asyncFile, string) {
	t.Helper()
	const dataOff = 64 << 10
	p := filepath.Join(t.TempDir(), "v.img")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(dataOff + size); err != nil {
		t.Fatal(err)
	}
	c, err := sector.New("aes-xts-plain64", key, sector.Options{SectorSize: ss})
	if err != nil {
		t.Fatal(err)
	}
	a := &asyncFile{File: f}
	var dev Device = f
	if async {
		dev = a
	}
	v, err := NewVolume(dev, c, dataOff, size, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v, a, p
}

// startWrite runs StartWriteAt and returns a channel with done's error.
func startWrite(t *testing.T, v *Volume, p []byte, off int64) (<-chan error, bool) {
	t.Helper()
	ch := make(chan error, 1)
	ok := v.StartWriteAt(p, off, func(err error) { ch <- err })
	return ch, ok
}

func waitDone(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("a started write never called done")
		return nil
	}
}

// TestVolumeStartWriteAt: writes started asynchronously leave the device
// holding exactly what WriteAt leaves on another, p holds the ciphertext
// afterwards, and reads see the data.
func TestVolumeStartWriteAt(t *testing.T) {
	for _, ss := range []int{512, 4096} {
		t.Run(fmt.Sprint(ss), func(t *testing.T) {
			key := make([]byte, 64)
			rand.Read(key)
			size := int64(3 * chunkSize)
			ref, _, refPath := asyncVolume(t, key, ss, size, false)
			v, a, path := asyncVolume(t, key, ss, size, true)
			r := mrand.New(mrand.NewPCG(uint64(ss), 7))
			s := int64(ss)
			for i := 0; i < 60; i++ {
				off := r.Int64N(size) / s * s
				n := max(s, r.Int64N(min(size-off, 2*chunkSize+1))/s*s)
				b := make([]byte, n)
				rand.Read(b)
				plain := bytes.Clone(b)
				if _, err := ref.WriteAt(plain, off); err != nil {
					t.Fatal(err)
				}
				ch, ok := startWrite(t, v, b, off)
				if !ok {
					t.Fatalf("StartWriteAt(%d bytes at %d) did not start", n, off)
				}
				if err := waitDone(t, ch); err != nil {
					t.Fatalf("write of %d bytes at %d: %v", n, off, err)
				}
				ct := make([]byte, n)
				if _, err := a.File.ReadAt(ct, v.DataOffset()+off); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(b, ct) || bytes.Equal(b, plain) {
					t.Fatalf("write at %d: the buffer does not hold the ciphertext written", off)
				}
				got := make([]byte, n)
				if _, err := v.ReadAt(got, off); err != nil || !bytes.Equal(got, plain) {
					t.Fatalf("read back at %d: %v, equal %v", off, err, bytes.Equal(got, plain))
				}
			}
			if n := a.started.Load(); n != 60 {
				t.Errorf("the device started %d writes, want 60", n)
			}
			want, _ := os.ReadFile(refPath)
			got, _ := os.ReadFile(path)
			if !bytes.Equal(got, want) {
				t.Fatal("the device differs from the one WriteAt wrote")
			}
		})
	}
}

// TestVolumeStartWriteAtRefuses: what StartWriteAt will not start, it
// leaves alone: no device write, no change, and the volume still works.
func TestVolumeStartWriteAtRefuses(t *testing.T) {
	key := make([]byte, 64)
	rand.Read(key)
	const size = 1 << 20
	v, a, path := asyncVolume(t, key, 4096, size, true)
	plainV, _, plainPath := asyncVolume(t, key, 4096, size, false)
	roC, err := sector.New("aes-xts-plain64", key, sector.Options{SectorSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	ro, err := NewVolume(a, roC, 64<<10, size, true)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	for _, tc := range []struct {
		name string
		v    *Volume
		n    int
		off  int64
	}{
		{"unaligned offset", v, 4096, 512},
		{"unaligned length", v, 4096 + 512, 0},
		{"empty", v, 0, 0},
		{"past the end", v, 8192, size - 4096},
		{"negative offset", v, 4096, -4096},
		{"read-only volume", ro, 4096, 0},
	} {
		if _, ok := startWrite(t, tc.v, make([]byte, tc.n), tc.off); ok {
			t.Errorf("%s: StartWriteAt started", tc.name)
		}
	}
	if _, ok := startWrite(t, plainV, make([]byte, 4096), 0); ok {
		t.Error("StartWriteAt started on a device without WriteAtAsync")
	}
	if n := a.started.Load(); n != 0 {
		t.Errorf("%d device writes for refused requests", n)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
		t.Error("a refused request changed the device")
	}
	if after, _ := os.ReadFile(plainPath); !bytes.Equal(after, before) {
		t.Error("a refused request changed the plain device")
	}
	if v.state.Load() != 0 {
		t.Errorf("refused requests left the share count at %d", v.state.Load())
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := startWrite(t, v, make([]byte, 4096), 0); ok {
		t.Error("StartWriteAt started on a closed volume")
	}
}

// TestVolumeStartWriteAtHolds: a started write holds its range's lock and
// its share of the volume until done: an overlapping StartWriteAt does not
// start (it would have to wait), an overlapping WriteAt waits, one
// elsewhere starts, and Close waits for all of them. A device error
// reaches done and lets go of both.
func TestVolumeStartWriteAtHolds(t *testing.T) {
	key := make([]byte, 64)
	rand.Read(key)
	v, a, _ := asyncVolume(t, key, 4096, 257<<20, true)
	a.gate = make(chan struct{})
	first, ok := startWrite(t, v, bytes.Repeat([]byte{1}, 8192), 0)
	if !ok {
		t.Fatal("the first write did not start")
	}
	if _, ok := startWrite(t, v, make([]byte, 4096), 4096); ok {
		t.Fatal("a write overlapping one in flight started")
	}
	other, ok := startWrite(t, v, bytes.Repeat([]byte{2}, 4096), 1<<20)
	if !ok {
		t.Fatal("a write elsewhere did not start")
	}
	// Writes up to 256 MiB away have locks of their own (nbdcopy keeps 64
	// MiB in flight); one a stripe period away shares the first one's.
	var far []<-chan error
	for _, off := range []int64{16 << 20, 64 << 20, 128 << 20, 256<<20 - 128<<10} {
		ch, ok := startWrite(t, v, make([]byte, 4096), off)
		if !ok {
			t.Fatalf("a write at %d MiB waited for one at 0", off>>20)
		}
		far = append(far, ch)
	}
	if _, ok := startWrite(t, v, make([]byte, 4096), lockStripes<<lockShift); ok {
		t.Fatal("a write sharing the first one's lock stripe started")
	}
	wrote := make(chan error, 1)
	go func() {
		_, err := v.WriteAt(bytes.Repeat([]byte{3}, 4096), 4096)
		wrote <- err
	}()
	closed := make(chan error, 1)
	time.Sleep(50 * time.Millisecond)
	go func() { closed <- v.Close() }()
	time.Sleep(50 * time.Millisecond)
	select {
	case <-wrote:
		t.Fatal("an overlapping WriteAt did not wait for the write in flight")
	case <-closed:
		t.Fatal("Close did not wait for the writes in flight")
	default:
	}
	close(a.gate)
	for _, ch := range append(far, first, other, wrote) {
		if err := waitDone(t, ch); err != nil {
			t.Fatal(err)
		}
	}
	if err := waitDone(t, closed); err != nil {
		t.Fatalf("close: %v", err)
	}

	v, a, _ = asyncVolume(t, key, 4096, 4<<20, true)
	a.fail = errors.New("device gone")
	ch, ok := startWrite(t, v, make([]byte, 4096), 0)
	if !ok {
		t.Fatal("did not start")
	}
	if err := waitDone(t, ch); !errors.Is(err, a.fail) {
		t.Fatalf("done got %v, want the device's error", err)
	}
	a.fail = nil
	ch, ok = startWrite(t, v, make([]byte, 4096), 0)
	if !ok {
		t.Fatal("the range stayed locked after a failed write")
	}
	if err := waitDone(t, ch); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
}
