package ntfs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf16"
)

// hostileBase is a volume made by mkntfs and ntfs-3g: d1/d2/deep.txt, a
// non-resident big.bin and a 300-entry directory with INDX blocks.
func hostileBase(t *testing.T) []byte {
	t.Helper()
	img := mkntfs(t, 16, "hostile")
	mnt, umount := mount(t, img)
	write(t, filepath.Join(mnt, "d1/d2/deep.txt"), []byte("deep\n"))
	write(t, filepath.Join(mnt, "big.bin"), bytes.Repeat([]byte("0123456789abcdef"), 10000))
	for i := range 300 {
		write(t, filepath.Join(mnt, fmt.Sprintf("many/%03d.txt", i)), []byte("x"))
	}
	umount()
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// recordOffset returns where MFT record num lies in the image.
func recordOffset(t *testing.T, v *FS, num uint64) int64 {
	t.Helper()
	pos := int64(num) * v.recordSize
	r := v.mft.find(pos / v.clusterSize)
	if r == nil || r.sparse {
		t.Fatalf("record %d not mapped", num)
	}
	return r.lcn*v.clusterSize + pos - r.vcn*v.clusterSize
}

// attrOffset returns the offset in the image of the first attribute of
// type typ of record num.
func attrOffset(t *testing.T, b []byte, v *FS, num uint64, typ uint32) int64 {
	t.Helper()
	ro := recordOffset(t, v, num)
	off := ro + int64(binary.LittleEndian.Uint16(b[ro+0x14:]))
	for binary.LittleEndian.Uint32(b[off:]) != attrEnd {
		if binary.LittleEndian.Uint32(b[off:]) == typ {
			return off
		}
		off += int64(binary.LittleEndian.Uint32(b[off+4:]))
	}
	t.Fatalf("record %d has no attribute %#x", num, typ)
	return 0
}

// nameOffset finds the UTF-16 name in the record num and returns the
// offset of the index entry holding it (the name is 82 bytes in).
func entryOffset(t *testing.T, b []byte, v *FS, num uint64, name string) int64 {
	t.Helper()
	ro := recordOffset(t, v, num)
	u := utf16.Encode([]rune(name))
	var n []byte
	for _, c := range u {
		n = binary.LittleEndian.AppendUint16(n, c)
	}
	i := bytes.Index(b[ro:ro+v.recordSize], n)
	if i < 0 {
		t.Fatalf("%q not in record %d", name, num)
	}
	return ro + int64(i) - 16 - 66
}

// TestHostile damages a real volume in the ways a hostile one would; each
// must fail with one line wrapping ErrCorrupt, without hanging.
func TestHostile(t *testing.T) {
	orig := hostileBase(t)
	v, err := Open(bytes.NewReader(orig), int64(len(orig)))
	if err != nil {
		t.Fatal(err)
	}
	rec := func(p string) *record {
		n, err := v.resolve("stat", p)
		if err != nil {
			t.Fatal(err)
		}
		return n.rec
	}
	d1, d2, big, many := rec("d1"), rec("d1/d2"), rec("big.bin"), rec("many")
	le := binary.LittleEndian
	cases := []struct {
		name  string
		patch func(b []byte)
	}{
		{"directory lists itself", func(b []byte) {
			o := entryOffset(t, b, v, d2.num, "deep.txt")
			le.PutUint64(b[o:], d2.num|uint64(d2.seq)<<48)
		}},
		{"directory lists its parent", func(b []byte) {
			o := entryOffset(t, b, v, d2.num, "deep.txt")
			le.PutUint64(b[o:], d1.num|uint64(d1.seq)<<48|0)
			le.PutUint32(b[o+16+56:], fileAttrDir)
		}},
		{"two directories share a subdirectory", func(b []byte) {
			o := entryOffset(t, b, v, d2.num, "deep.txt")
			le.PutUint64(b[o:], many.num|uint64(many.seq)<<48)
			le.PutUint32(b[o+16+56:], fileAttrDir)
		}},
		{"stale reference", func(b []byte) {
			o := entryOffset(t, b, v, d1.num, "d2")
			le.PutUint64(b[o:], d2.num|uint64(d2.seq+1)<<48)
		}},
		{"reference beyond the MFT", func(b []byte) {
			o := entryOffset(t, b, v, d1.num, "d2")
			le.PutUint64(b[o:], 1<<40)
		}},
		{"fixup mismatch", func(b []byte) { b[recordOffset(t, v, d1.num)+510] ^= 0xFF }},
		{"fixup mismatch in the MFT's own record", func(b []byte) { b[recordOffset(t, v, 0)+1022] ^= 0xFF }},
		{"attribute of length zero", func(b []byte) {
			le.PutUint32(b[attrOffset(t, b, v, big.num, attrData)+4:], 0)
		}},
		{"attribute longer than its record", func(b []byte) {
			le.PutUint32(b[attrOffset(t, b, v, big.num, attrData)+4:], 0x10000)
		}},
		{"runlist leaves the volume", func(b []byte) {
			a := attrOffset(t, b, v, big.num, attrData)
			r := a + int64(le.Uint16(b[a+32:]))
			b[r] = 0x41 // 1-byte length, 4-byte LCN
			le.PutUint32(b[r+2:], 0x7FFFFFF0)
		}},
		{"runlist shorter than the data", func(b []byte) {
			a := attrOffset(t, b, v, big.num, attrData)
			le.PutUint64(b[a+48:], 1<<40)
		}},
		{"index node is its own child", func(b []byte) {
			// The root of "many" points at one INDX block whose
			// entries point at the leaves: one of them is made to
			// point back at that block.
			root, err := many.find(attrIndexRoot, "$I30", "many")
			if err != nil {
				t.Fatal(err)
			}
			val := root.value
			_, subs, err := parseEntries(val[16+le.Uint32(val[16:]):16+le.Uint32(val[20:])], "many")
			if err != nil || len(subs) == 0 {
				t.Fatalf("root of many: %v %v", subs, err)
			}
			alloc, err := many.find(attrIndexAlloc, "$I30", "many")
			if err != nil {
				t.Fatal(err)
			}
			s, err := v.openStream(alloc, "many")
			if err != nil {
				t.Fatal(err)
			}
			bsize := int64(le.Uint32(val[8:]))
			vcn := subs[0]
			r := s.find(vcn * bsize / v.clusterSize)
			blk := r.lcn*v.clusterSize + vcn*bsize - r.vcn*v.clusterSize
			fixed := slices.Clone(b[blk : blk+bsize])
			if err := fixup(fixed, "INDX", "test"); err != nil {
				t.Fatal(err)
			}
			o := int64(0x18 + le.Uint32(fixed[0x18:]))
			for {
				n := int64(le.Uint16(fixed[o+8:]))
				at := o + n - 8
				if le.Uint32(fixed[o+12:])&1 != 0 && at%512 < 504 {
					le.PutUint64(b[blk+at:], uint64(vcn))
					return
				}
				if n == 0 || le.Uint32(fixed[o+12:])&2 != 0 {
					t.Fatal("no child pointer to patch")
				}
				o += n
			}
		}},
		{"MFT beyond the volume", func(b []byte) { le.PutUint64(b[0x30:], 1<<40) }},
		{"MFT record size code", func(b []byte) { b[0x40] = 0xE0 }},
		{"zero sectors per cluster", func(b []byte) { b[13] = 0 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := slices.Clone(orig)
			c.patch(b)
			err := walkAll(b)
			if !errors.Is(err, ErrCorrupt) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("got %v, want one line wrapping ErrCorrupt", err)
			}
			t.Log(err)
		})
	}
}

// walkAll opens b, walks it and reads every file (1 MiB of each at
// most, to keep a fuzzed sparse file from costing its size).
func walkAll(b []byte) error {
	v, err := Open(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return err
	}
	v.Label()
	return fs.WalkDir(v, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if _, err := d.Info(); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		f, err := v.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(io.Discard, io.LimitReader(f, 1<<20))
		return err
	})
}
