package partition

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
)

// The shape blkcrypt.URIDevice asks for (not imported: the root package
// sits above this one).
var _ interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
	Size() (int64, error)
	Close() error
} = (*Device)(nil)

// extent is where a tool says a partition is, in bytes.
type extent struct {
	number      int
	start, size int64
}

// hashOutside hashes the image except [start, start+size).
func hashOutside(t testing.TB, img string, start, size int64) [32]byte {
	t.Helper()
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	h.Write(b[:start])
	h.Write(b[start+size:])
	var s [32]byte
	h.Sum(s[:0])
	return s
}

// checkBounded writes through each partition's Device and checks, with
// plain reads of the image at the offsets the tool gave, that exactly the
// partition's bytes changed.
func checkBounded(t *testing.T, img string, tb *Table, exts []extent) {
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, e := range exts {
		before := hashOutside(t, img, e.start, e.size)
		d, err := tb.Open(f, strconv.Itoa(e.number), DeviceOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := d.Size(); err != nil || n != e.size {
			t.Fatalf("partition %d: Size %d, %v; the tool says %d", e.number, n, err, e.size)
		}
		// Requests that cross or pass an end are refused whole.
		for _, w := range []struct {
			n   int
			off int64
		}{{2, e.size - 1}, {1, e.size}, {1 << 20, e.size - 512}, {1, -1}, {1, 1 << 62}} {
			if n, err := d.WriteAt(bytes.Repeat([]byte{0xEE}, w.n), w.off); n != 0 || !errors.Is(err, ErrOutOfRange) {
				t.Errorf("partition %d: WriteAt(%d bytes, %d) = %d, %v; want 0, ErrOutOfRange", e.number, w.n, w.off, n, err)
			}
		}
		if n, err := d.WriteAt(nil, e.size); n != 0 || err != nil {
			t.Errorf("empty write at the end: %d, %v", n, err)
		}
		// Fill the partition, in uneven pieces, through the device.
		want := make([]byte, e.size)
		for i := range want {
			want[i] = byte(rng.Uint32())
		}
		for off := int64(0); off < e.size; {
			n := min(int64(rng.IntN(300000)+1), e.size-off)
			if m, err := d.WriteAt(want[off:off+n], off); err != nil || int64(m) != n {
				t.Fatalf("partition %d: WriteAt(%d, %d) = %d, %v", e.number, n, off, m, err)
			}
			off += n
		}
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
		// Reads as a file's.
		buf := make([]byte, 10)
		if n, err := d.ReadAt(buf, e.size-5); n != 5 || err != io.EOF || !bytes.Equal(buf[:5], want[e.size-5:]) {
			t.Errorf("partition %d: read across the end: %d, %v", e.number, n, err)
		}
		if n, err := d.ReadAt(buf, e.size); n != 0 || err != io.EOF {
			t.Errorf("partition %d: read at the end: %d, %v", e.number, n, err)
		}
		if n, err := d.ReadAt(buf, e.size-10); n != 10 || err != nil || !bytes.Equal(buf, want[e.size-10:]) {
			t.Errorf("partition %d: read up to the end: %d, %v", e.number, n, err)
		}
		if n, err := d.ReadAt(buf, -1); n != 0 || !errors.Is(err, ErrOutOfRange) {
			t.Errorf("partition %d: read at -1: %d, %v", e.number, n, err)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		// The image, read plainly where the tool says the partition is.
		got := make([]byte, e.size)
		if _, err := f.ReadAt(got, e.start); err != nil {
			t.Fatalf("the disk itself is closed or unreadable after the partition's Close: %v", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("partition %d: the image's bytes %d-%d are not what was written", e.number, e.start, e.start+e.size)
		}
		if after := hashOutside(t, img, e.start, e.size); after != before {
			t.Errorf("partition %d: bytes outside %d-%d changed", e.number, e.start, e.start+e.size)
		}
	}
}

func TestDeviceBoundedMBR(t *testing.T) {
	img := newImage(t, "mbr.img", 32<<20)
	makeMBR(t, img)
	st := sfdiskJSON(t, img)
	ss := int64(st.PartitionTable.SectorSize)
	var exts []extent
	for _, p := range st.PartitionTable.Partitions {
		if p.Type == "5" {
			continue // the extended partition: Open refuses it (TestMBRLinuxRules)
		}
		exts = append(exts, extent{nodeNumber(t, img, p.Node), p.Start * ss, p.Size * ss})
	}
	tb := mustRead(t, img, Options{})
	checkBounded(t, img, tb, exts)
	// The EBR chain survived writes that filled every logical partition.
	if tb2 := mustRead(t, img, Options{}); len(tb2.Partitions) != len(tb.Partitions) {
		t.Errorf("after the writes: %+v", tb2.Partitions)
	}
}

func TestDeviceBoundedGPT(t *testing.T) {
	sg := sgdisk(t)
	img := newImage(t, "gpt.img", 20<<20)
	run(t, "", sg, gptLayout(img)...)
	d := parseSgdiskP(t, run(t, "", sg, "-p", img))
	var exts []extent
	for _, n := range d.numbers {
		s := parseSgdiskI(t, run(t, "", sg, "-i", strconv.Itoa(n), img))
		ss := int64(d.sectorSize)
		exts = append(exts, extent{n, int64(s.first) * ss, int64(s.last-s.first+1) * ss})
	}
	tb := mustRead(t, img, Options{})
	checkBounded(t, img, tb, exts)
	if v := sgdiskVerify(t, img); !v.found || !v.mainHeader || !v.mainTable || !v.backupHeader || !v.backupTable {
		t.Errorf("sgdisk -v after the writes: %+v", v)
	}
}

// disk is an in-memory disk that counts Sync and Close.
type disk struct {
	bytes.Reader
	w            []byte
	syncs, close int
}

func (d *disk) WriteAt(p []byte, off int64) (int, error) { return copy(d.w[off:], p), nil }
func (d *disk) Sync() error                              { d.syncs++; return nil }
func (d *disk) Close() error                             { d.close++; return nil }

func TestDeviceOptions(t *testing.T) {
	p := Partition{Number: 3, Start: 1024, Size: 4096}
	mem := make([]byte, 8192)
	dk := &disk{w: mem}
	dk.Reset(mem)

	d, err := Open(dk, p, DeviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.WriteAt([]byte("x"), 0); err != nil || mem[1024] != 'x' {
		t.Fatalf("write: %v", err)
	}
	if err := d.Sync(); err != nil || dk.syncs != 1 {
		t.Fatalf("Sync: %v, %d syncs", err, dk.syncs)
	}
	if err := d.Close(); err != nil || dk.close != 0 || dk.syncs != 2 {
		t.Fatalf("Close: %v; the disk was closed %d times, synced %d (want 0, 2)", err, dk.close, dk.syncs)
	}
	for name, err := range map[string]error{
		"ReadAt":  second(d.ReadAt(make([]byte, 1), 0)),
		"WriteAt": second(d.WriteAt(make([]byte, 1), 0)),
		"Size":    second(d.Size()),
		"Sync":    d.Sync(),
		"Close":   d.Close(),
	} {
		if !errors.Is(err, fs.ErrClosed) {
			t.Errorf("%s after Close: %v", name, err)
		}
	}

	d, _ = Open(dk, p, DeviceOptions{CloseDisk: true})
	if err := d.Close(); err != nil || dk.close != 1 {
		t.Fatalf("CloseDisk: %v, %d closes", err, dk.close)
	}

	d, _ = Open(dk, p, DeviceOptions{ReadOnly: true})
	if _, err := d.WriteAt([]byte("y"), 0); !errors.Is(err, ErrReadOnly) || mem[1024] != 'x' || !d.ReadOnly() {
		t.Errorf("ReadOnly write: %v", err)
	}
	d, _ = Open(bytes.NewReader(mem), p, DeviceOptions{})
	if _, err := d.WriteAt([]byte("y"), 0); !errors.Is(err, ErrReadOnly) {
		t.Errorf("write over an io.ReaderAt: %v", err)
	}
	if err := d.Sync(); err != nil {
		t.Errorf("Sync over an io.ReaderAt: %v", err)
	}

	for _, bad := range []Partition{{Size: 0}, {Start: -1, Size: 1}, {Start: 1 << 62, Size: 1 << 62}, {Start: 512, Size: 512, Extended: true}} {
		if _, err := Open(dk, bad, DeviceOptions{}); !errors.Is(err, ErrInvalid) {
			t.Errorf("Open(%+v): %v", bad, err)
		}
	}

	// A disk shorter than its partition: the read says so.
	d, _ = Open(bytes.NewReader(mem[:2048]), p, DeviceOptions{})
	if n, err := d.ReadAt(make([]byte, 2048), 0); n != 1024 || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("read of a truncated disk: %d, %v", n, err)
	}
	tb := &Table{Scheme: GPT, DiskSize: 2048, Partitions: []Partition{p}}
	if _, err := tb.Open(bytes.NewReader(mem), "3", DeviceOptions{}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Table.Open of a partition past the disk: %v", err)
	}
}

func second[T any](_ T, err error) error { return err }

// TestDeviceConcurrentClose: reads and writes racing Close either finish
// or see fs.ErrClosed (run with -race).
func TestDeviceConcurrentClose(t *testing.T) {
	mem := make([]byte, 1<<20)
	dk := &disk{w: mem}
	dk.Reset(mem)
	d, err := Open(dk, Partition{Number: 1, Start: 4096, Size: 1 << 19}, DeviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(base int64) {
			defer wg.Done()
			b := make([]byte, 4096)
			for i := 0; i < 200; i++ {
				// Each goroutine keeps to its own region: the in-memory
				// disk is no more concurrent than a []byte.
				off := base + int64(i*512%(1<<16))
				if _, err := d.ReadAt(b, off); err != nil && !errors.Is(err, fs.ErrClosed) {
					t.Error(err)
					return
				}
				if _, err := d.WriteAt(b[:512], off); err != nil && !errors.Is(err, fs.ErrClosed) {
					t.Error(err)
					return
				}
			}
		}(int64(g) << 17)
	}
	d.Close()
	wg.Wait()
}
