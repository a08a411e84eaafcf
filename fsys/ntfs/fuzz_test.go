package ntfs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf16"
)

// FuzzNTFS opens arbitrary bytes as a volume, walks it and reads every
// file: an error must be one line, and wrap ErrCorrupt or ErrUnsupported
// (or io.EOF: a read past the end of the bytes). The seed is synth(), a minimal volume of
// 64 KiB (a real mkntfs volume is 1 MiB at least, too large to fuzz
// fast); TestSynth checks that it reads.
func FuzzNTFS(f *testing.F) {
	f.Add(synth())
	f.Fuzz(func(t *testing.T, b []byte) {
		err := walkAll(b)
		if err == nil {
			return
		}
		if strings.Contains(err.Error(), "\n") {
			t.Fatalf("error of more than one line: %q", err)
		}
		if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupported) && !errors.Is(err, io.EOF) {
			t.Fatalf("error neither ErrCorrupt nor ErrUnsupported: %v", err)
		}
	})
}

// TestSynth reads the fuzz seed: a resident file, a non-resident one
// with a sparse run, the label.
func TestSynth(t *testing.T) {
	b := synth()
	v, err := Open(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if v.Label() != "SYNTH" {
		t.Fatalf("label %q", v.Label())
	}
	got, err := v.ReadFile("hello.txt")
	if err != nil || string(got) != "hello\n" {
		t.Fatalf("hello.txt: %q %v", got, err)
	}
	got, err = v.ReadFile("runs.bin")
	want := append(bytes.Repeat([]byte{0xAB}, 512), make([]byte, 188)...)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("runs.bin: %d bytes, %v", len(got), err)
	}
	if err := walkAll(b); err != nil {
		t.Fatal(err)
	}

	// Found by FuzzNTFS: the index calling a file a directory made a
	// walk fail with "not a directory"; now it is corrupt.
	name := []byte{'h', 0, 'e', 0, 'l', 0, 'l', 0, 'o', 0}
	c := bytes.Clone(b)
	key := bytes.Index(c, name) - 66
	binary.LittleEndian.PutUint32(c[key+56:], fileAttrDir)
	if err := walkAll(c); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("file indexed as a directory: %v", err)
	}
	// Found by FuzzNTFS: an entry named "." (no name io/fs can carry) is
	// left out rather than returned as a path.
	c = bytes.Clone(b)
	key = bytes.Index(c, name) - 66
	c[key+64] = 1
	c[key+66] = '.'
	if err := walkAll(c); err != nil {
		t.Fatalf("entry named \".\": %v", err)
	}

	// Found by FuzzNTFS: an $MFT record without $DATA said "no such
	// attribute" without ErrCorrupt.
	b[4*512+0x38+72] = 0x70 // $DATA, after $STANDARD_INFORMATION (24 + 48 bytes), made another type
	_, err = Open(bytes.NewReader(b), int64(len(b)))
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("$MFT without $DATA: %v", err)
	}
}

// synth builds a 64 KiB NTFS volume by hand: 512-byte clusters, 1 KiB
// records, an MFT of 24 records at cluster 4 (records 0 $MFT, 3 $Volume,
// 5 the root, 16 hello.txt resident, 17 runs.bin: one cluster of 0xAB
// then a sparse cluster).
func synth() []byte {
	const cs, rs = 512, 1024
	img := make([]byte, 64<<10)
	le := binary.LittleEndian
	copy(img, []byte{0xEB, 0x52, 0x90})
	copy(img[3:], "NTFS    ")
	le.PutUint16(img[11:], 512)
	img[13] = 1
	le.PutUint64(img[0x28:], uint64(len(img)/512-1))
	le.PutUint64(img[0x30:], 4)  // $MFT
	le.PutUint64(img[0x38:], 20) // $MFTMirr (unused here)
	img[0x40] = 0xF6             // 2^10-byte records
	img[0x44] = 0xF4             // 4 KiB index blocks
	le.PutUint64(img[0x48:], 0x1122334455667788)
	img[510], img[511] = 0x55, 0xAA

	attr := func(typ uint32, name string, body []byte, resident bool) []byte {
		n := utf16.Encode([]rune(name))
		hdr := 24
		if !resident {
			hdr = 64
		}
		nameOff := hdr
		valOff := (nameOff + 2*len(n) + 7) &^ 7
		a := make([]byte, (valOff+len(body)+7)&^7)
		le.PutUint32(a, typ)
		le.PutUint32(a[4:], uint32(len(a)))
		a[9] = byte(len(n))
		le.PutUint16(a[10:], uint16(nameOff))
		for i, c := range n {
			le.PutUint16(a[nameOff+2*i:], c)
		}
		copy(a[valOff:], body)
		if resident {
			le.PutUint32(a[16:], uint32(len(body)))
			le.PutUint16(a[20:], uint16(valOff))
		} else {
			a[8] = 1
			le.PutUint16(a[32:], uint16(valOff))
		}
		return a
	}
	nonres := func(a []byte, lastVCN, size int64) []byte {
		le.PutUint64(a[24:], uint64(lastVCN))
		le.PutUint64(a[40:], uint64((lastVCN+1)*cs))
		le.PutUint64(a[48:], uint64(size))
		le.PutUint64(a[56:], uint64(size))
		return a
	}
	utf := func(s string) []byte {
		var b []byte
		for _, c := range utf16.Encode([]rune(s)) {
			b = le.AppendUint16(b, c)
		}
		return b
	}
	record := func(num int, flags uint16, attrs ...[]byte) {
		r := img[4*cs+num*rs:][:rs]
		copy(r, "FILE")
		le.PutUint16(r[4:], 0x30) // update sequence at 0x30, 3 entries
		le.PutUint16(r[6:], 3)
		le.PutUint16(r[0x10:], 1) // sequence number
		le.PutUint16(r[0x14:], 0x38)
		le.PutUint16(r[0x16:], flags)
		off := 0x38
		for _, a := range attrs {
			copy(r[off:], a)
			off += len(a)
		}
		le.PutUint32(r[off:], attrEnd)
		le.PutUint32(r[0x18:], uint32(off+8))
		le.PutUint32(r[0x1C:], rs)
		// Fixups: the sequence number 1 at each sector's end, the
		// real bytes (zeros here) in the array.
		le.PutUint16(r[0x30:], 1)
		le.PutUint16(r[510:], 1)
		le.PutUint16(r[1022:], 1)
	}
	si := attr(attrStandardInfo, "", make([]byte, 48), true)
	record(0, recInUse, si, nonres(attr(attrData, "", []byte{0x11, 48, 4, 0}, false), 47, 24*rs))
	record(3, recInUse, si, attr(attrVolumeName, "", utf("SYNTH"), true))
	// The root index: hello.txt (16), runs.bin (17), the end entry.
	entry := func(ref uint64, name string) []byte {
		key := make([]byte, 66)
		le.PutUint64(key, 5|1<<48)
		key[64] = byte(len([]rune(name)))
		key[65] = 1 // Win32
		key = append(key, utf(name)...)
		e := make([]byte, (16+len(key)+7)&^7)
		le.PutUint64(e, ref|1<<48)
		le.PutUint16(e[8:], uint16(len(e)))
		le.PutUint16(e[10:], uint16(len(key)))
		copy(e[16:], key)
		return e
	}
	ents := append(entry(16, "hello.txt"), entry(17, "runs.bin")...)
	end := make([]byte, 16)
	le.PutUint16(end[8:], 16)
	le.PutUint32(end[12:], 2)
	ents = append(ents, end...)
	ir := make([]byte, 32)
	le.PutUint32(ir, attrFileName)
	le.PutUint32(ir[4:], 1)
	le.PutUint32(ir[8:], 4096)
	ir[12] = 8
	le.PutUint32(ir[16:], 16)
	le.PutUint32(ir[20:], uint32(16+len(ents)))
	le.PutUint32(ir[24:], uint32(16+len(ents)))
	ir = append(ir, ents...)
	record(5, recInUse|recDir, si, attr(attrIndexRoot, "$I30", ir, true))
	record(16, recInUse, si, attr(attrData, "", []byte("hello\n"), true))
	// runs.bin: one cluster at LCN 100, then a sparse one; 700 bytes.
	record(17, recInUse, si, nonres(attr(attrData, "", []byte{0x11, 1, 100, 0x01, 1, 0}, false), 1, 700))
	for i := range cs {
		img[100*cs+i] = 0xAB
	}
	return img
}
