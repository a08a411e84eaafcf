package nbdclient

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestRoundTripNbdkit writes and reads back through nbdkit's memory plugin,
// over a Unix socket and TCP, with requests larger than the maximum so they
// are split and pipelined, and concurrent callers.
func TestRoundTripNbdkit(t *testing.T) {
	for _, tcp := range []bool{false, true} {
		s := startNbdkit(t, tcp, "memory", "64M")
		c := dialT(t, s.URI, Options{})
		if n, _ := c.Size(); n != 64<<20 {
			t.Fatalf("size %d, want 64 MiB", n)
		}
		data := make([]byte, 40<<20) // more than the 32 MiB request cap
		rand.Read(data)
		if _, err := c.WriteAt(data, 4096); err != nil {
			t.Fatal(err)
		}
		if err := c.Sync(); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(data))
		if _, err := c.ReadAt(got, 4096); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatal("read back differs from what was written")
		}
		// Concurrent small unaligned requests.
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				b := bytes.Repeat([]byte{byte(i + 1)}, 1000+i)
				off := int64(50<<20 + i*8192 + 7)
				if _, err := c.WriteAt(b, off); err != nil {
					errs <- err
					return
				}
				r := make([]byte, len(b))
				if _, err := c.ReadAt(r, off); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(r, b) {
					errs <- errors.New("concurrent round trip differs")
				}
			}(i)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		// Past the end: ReaderAt semantics, and a refused write.
		r := make([]byte, 100)
		if n, err := c.ReadAt(r, 64<<20-50); n != 50 || err != io.EOF {
			t.Fatalf("read across the end: %d, %v", n, err)
		}
		if _, err := c.WriteAt(r, 64<<20-50); !errors.Is(err, ErrOutOfRange) {
			t.Fatalf("write across the end: %v", err)
		}
	}
}

// TestBlockSizePolicy has nbdkit advertise a 4 KiB minimum and a 64 KiB
// maximum and fail any request that breaks them: unaligned and large
// requests must still work, so the client aligns and splits.
func TestBlockSizePolicy(t *testing.T) {
	s := startNbdkit(t, false, "--filter=blocksize-policy", "memory", "8M",
		"blocksize-minimum=4096", "blocksize-preferred=16384", "blocksize-maximum=65536", "blocksize-error-policy=error")
	c := dialT(t, s.URI, Options{})
	if mn, pr, mx := c.BlockSizes(); mn != 4096 || pr != 16384 || mx != 65536 {
		t.Fatalf("block sizes %d/%d/%d, want 4096/16384/65536", mn, pr, mx)
	}
	data := make([]byte, 300000)
	rand.Read(data)
	if _, err := c.WriteAt(data, 1234); err != nil {
		t.Fatalf("unaligned large write: %v", err)
	}
	got := make([]byte, len(data))
	if _, err := c.ReadAt(got, 1234); err != nil {
		t.Fatalf("unaligned large read: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("read back differs")
	}
	// Neighbours of the unaligned write were preserved (read-modify-write).
	head := make([]byte, 1234)
	if _, err := c.ReadAt(head, 0); err != nil || !bytes.Equal(head, make([]byte, 1234)) {
		t.Fatalf("bytes before the write changed (%v)", err)
	}
}

// TestFileAndHoles reads a sparse file through nbdkit's file plugin, whose
// structured replies may carry holes, and checks it against the file.
func TestFileAndHoles(t *testing.T) {
	p := filepath.Join(t.TempDir(), "img")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 4<<20)
	rand.Read(want[1<<20 : 1<<20+5000])
	f.Write(want)
	f.Close()
	s := startNbdkit(t, false, "file", p)
	c := dialT(t, s.URI, Options{})
	got := make([]byte, len(want))
	if _, err := c.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("read differs from the file")
	}
}
