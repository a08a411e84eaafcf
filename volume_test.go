package blkcrypt

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func tempPlain(t *testing.T, size int64, ss int) *Volume {
	t.Helper()
	p := filepath.Join(t.TempDir(), "v.img")
	if err := os.WriteFile(p, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 64)
	rand.Read(key)
	v, err := OpenPlain(p, key, PlainOptions{SectorSize: ss})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v
}

// TestVolumeUnalignedAgainstShadow: random unaligned writes and reads match
// a plain in-memory shadow copy.
func TestVolumeUnalignedAgainstShadow(t *testing.T) {
	for _, ss := range []int{512, 4096} {
		v := tempPlain(t, 3*chunkSize, ss)
		// Zeros on disk decrypt to noise: start the shadow from the volume.
		shadow := make([]byte, v.Size())
		if _, err := v.ReadAt(shadow, 0); err != nil {
			t.Fatal(err)
		}
		r := mrand.New(mrand.NewPCG(uint64(ss), 9))
		for i := 0; i < 300; i++ {
			off := r.Int64N(v.Size())
			n := 1 + r.Int64N(min(v.Size()-off, 20000))
			if r.IntN(3) == 0 {
				// Whole sectors, sometimes longer than one chunk: the
				// out-of-place path.
				s := int64(ss)
				off = off / s * s
				n = max(s, min(v.Size()-off, r.Int64N(3*chunkSize))/s*s)
			}
			if r.IntN(2) == 0 {
				b := make([]byte, n)
				rand.Read(b)
				orig := bytes.Clone(b)
				if _, err := v.WriteAt(b, off); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(b, orig) {
					t.Fatalf("sector size %d: write of %d at %d changed the caller's buffer", ss, n, off)
				}
				copy(shadow[off:], b)
			} else {
				b := make([]byte, n)
				if _, err := v.ReadAt(b, off); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(b, shadow[off:off+n]) {
					t.Fatalf("sector size %d: read of %d at %d differs from the shadow", ss, n, off)
				}
			}
		}
	}
}

// TestVolumeWriteAtInPlace: WriteAtInPlace puts on the device exactly what
// WriteAt does (two files, one key, the same writes: aligned, unaligned and
// longer than a chunk), and after a whole-sector write its buffer holds the
// ciphertext that went to the device.
func TestVolumeWriteAtInPlace(t *testing.T) {
	for _, ss := range []int{512, 4096} {
		dir := t.TempDir()
		key := make([]byte, 64)
		rand.Read(key)
		size := int64(3 * chunkSize)
		var vols [2]*Volume
		var paths [2]string
		for i := range vols {
			paths[i] = filepath.Join(dir, fmt.Sprint(i))
			if err := os.WriteFile(paths[i], make([]byte, size), 0o600); err != nil {
				t.Fatal(err)
			}
			v, err := OpenPlain(paths[i], key, PlainOptions{SectorSize: ss})
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			vols[i] = v
		}
		r := mrand.New(mrand.NewPCG(uint64(ss), 11))
		s := int64(ss)
		for i := 0; i < 100; i++ {
			off := r.Int64N(size)
			n := 1 + r.Int64N(min(size-off, 20000))
			whole := r.IntN(2) == 0
			if whole {
				off = off / s * s
				n = max(s, min(size-off, r.Int64N(3*chunkSize))/s*s)
			}
			b := make([]byte, n)
			rand.Read(b)
			if _, err := vols[0].WriteAt(bytes.Clone(b), off); err != nil {
				t.Fatal(err)
			}
			if _, err := vols[1].WriteAtInPlace(b, off); err != nil {
				t.Fatal(err)
			}
			if whole {
				ct := make([]byte, n)
				f, err := os.Open(paths[1])
				if err != nil {
					t.Fatal(err)
				}
				_, err = f.ReadAt(ct, off)
				f.Close()
				if err != nil || !bytes.Equal(b, ct) {
					t.Fatalf("sector size %d: after a whole-sector write of %d at %d the buffer is not the ciphertext on the device (%v)", ss, n, off, err)
				}
			}
		}
		a, err := os.ReadFile(paths[0])
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(paths[1])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Fatalf("sector size %d: the devices differ after the same WriteAt and WriteAtInPlace writes", ss)
		}
	}
	p := filepath.Join(t.TempDir(), "ro")
	if err := os.WriteFile(p, make([]byte, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	ro, err := Open(context.Background(), p, OpenOptions{Type: TypePlain, VolumeKey: make([]byte, 64), Plain: PlainOptions{KeySize: 64}, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	b := bytes.Repeat([]byte{7}, 4096)
	if _, err := ro.WriteAtInPlace(b, 0); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("WriteAtInPlace on a read-only volume: %v, want ErrReadOnly", err)
	}
	if !bytes.Equal(b, bytes.Repeat([]byte{7}, 4096)) {
		t.Fatal("a refused WriteAtInPlace changed its buffer")
	}
}

// TestVolumeNoTornSectors: writers fill whole sectors with one byte value
// while readers check that every sector they see is uniform; overlapping
// unaligned writers must not lose each other's bytes.
func TestVolumeNoTornSectors(t *testing.T) {
	v := tempPlain(t, 256<<10, 4096)
	// Zeros on disk decrypt to noise: give the watched sectors uniform
	// contents before the readers start.
	if _, err := v.WriteAt(make([]byte, 5*4096), 0); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := 1; w <= 4; w++ {
		wg.Add(1)
		go func(id byte) {
			defer wg.Done()
			b := bytes.Repeat([]byte{id}, 8192)
			for i := 0; i < 200; i++ {
				if _, err := v.WriteAt(b, int64(i%4)*4096); err != nil {
					t.Error(err)
					return
				}
			}
		}(byte(w))
	}
	var rg sync.WaitGroup
	for r := 0; r < 2; r++ {
		rg.Add(1)
		go func() {
			defer rg.Done()
			b := make([]byte, 4096)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := v.ReadAt(b, 4096); err != nil {
					t.Error(err)
					return
				}
				for _, c := range b {
					if c != b[0] {
						t.Error("torn sector")
						return
					}
				}
			}
		}()
	}
	// Unaligned byte writers on disjoint bytes of one sector: none may be
	// lost to another's read-modify-write.
	var bg sync.WaitGroup
	for i := 0; i < 8; i++ {
		bg.Add(1)
		go func(i int) {
			defer bg.Done()
			for k := 0; k < 50; k++ {
				if _, err := v.WriteAt([]byte{byte(i + 1)}, 200000+int64(i*3)); err != nil {
					t.Error(err)
				}
			}
		}(i)
	}
	wg.Wait()
	bg.Wait()
	close(stop)
	rg.Wait()
	got := make([]byte, 24)
	v.ReadAt(got, 200000)
	for i := 0; i < 8; i++ {
		if got[i*3] != byte(i+1) {
			t.Fatalf("byte writer %d lost its write", i)
		}
	}
}

// TestVolumeZeroAllocs: aligned reads and writes allocate nothing per call.
func TestVolumeZeroAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	v := tempPlain(t, 1<<20, 4096)
	buf := make([]byte, 256<<10)
	v.WriteAt(buf, 0)
	v.ReadAt(buf, 0)
	if a := testing.AllocsPerRun(20, func() { v.ReadAt(buf, 65536) }); a > 0 && !raceEnabled {
		t.Errorf("ReadAt: %v allocs", a)
	}
	if a := testing.AllocsPerRun(20, func() { v.WriteAt(buf, 65536) }); a > 0 && !raceEnabled {
		t.Errorf("WriteAt: %v allocs", a)
	}
	if a := testing.AllocsPerRun(20, func() { v.WriteAtInPlace(buf, 65536) }); a > 0 && !raceEnabled {
		t.Errorf("WriteAtInPlace: %v allocs", a)
	}
}
