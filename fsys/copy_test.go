package fsys

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"testing"
)

// recordingReader serves data, recording the size of every buffer it is
// handed and keeping the last one.
type recordingReader struct {
	r     io.Reader
	sizes []int
	buf   []byte
}

func (r *recordingReader) Read(p []byte) (int, error) {
	r.sizes = append(r.sizes, len(p))
	r.buf = p
	return r.r.Read(p)
}

// TestCopyReads: Copy reads in 1 MiB buffers, neither the 32 KiB io.Copy
// or a writer's ReadFrom would pick nor the 4 MiB that fell out of the
// caches (BenchmarkCatThroughStack), copies every byte, and leaves its
// buffer cleared: it held file data.
func TestCopyReads(t *testing.T) {
	data := make([]byte, 3<<20+5)
	rand.Read(data)
	for round := 0; round < 2; round++ { // the second takes a buffer from the pool
		src := &recordingReader{r: bytes.NewReader(data)}
		var out bytes.Buffer // has ReadFrom, which Copy must not use
		n, err := Copy(context.Background(), &out, src)
		if err != nil || n != int64(len(data)) || !bytes.Equal(out.Bytes(), data) {
			t.Fatalf("copied %d of %d bytes (equal %v), %v", n, len(data), bytes.Equal(out.Bytes(), data), err)
		}
		for i, s := range src.sizes {
			if s != 1<<20 {
				t.Errorf("read %d: a %d-byte buffer, want 1 MiB", i, s)
			}
		}
		if len(src.sizes) != 5 { // 3 MiB, 5 bytes, io.EOF
			t.Errorf("%d reads for 3 MiB + 5 bytes, want 5", len(src.sizes))
		}
		if b := src.buf[:cap(src.buf)]; !bytes.Equal(b, make([]byte, len(b))) {
			t.Errorf("round %d: Copy's buffer holds file data after it returned", round)
		}
	}
}
