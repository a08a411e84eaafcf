package probe

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"
	"io"
	"strings"
	"testing"
)

// FuzzTree walks arbitrary bytes as a disk: a tree or a one-line error,
// never a panic or a hang; every node's size fits in its parent. The
// seeds are Identify's signatures and a minimal protective MBR + GPT with
// one partition.
func FuzzTree(f *testing.F) {
	for _, s := range seeds() {
		f.Add(s.b)
	}
	f.Add(tinyGPT())
	f.Fuzz(func(t *testing.T, b []byte) {
		root, err := Tree(context.Background(), bytes.NewReader(b), int64(len(b)), "d", TreeOptions{
			Unlock: func(ctx context.Context, dev io.ReaderAt, size int64, info Info) (Volume, error) {
				return nil, io.ErrUnexpectedEOF // nothing to unlock here
			}})
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("a multi-line error: %q", err)
			}
			return
		}
		var walk func(n *Node, max int64)
		walk = func(n *Node, max int64) {
			if n.Size < 0 || n.Size > max {
				t.Fatalf("%s: size %d outside its parent's %d", n.Name, n.Size, max)
			}
			for _, c := range n.Children {
				walk(c, n.Size)
			}
		}
		walk(root, int64(len(b)))
	})
}

// tinyGPT is a 50 KiB disk: a protective MBR, a GPT header at LBA 1 with
// one entry (LBA 34 to 66, a Linux filesystem) and the entry array at LBA
// 2. The backup is absent, which Read warns about.
func tinyGPT() []byte {
	le := binary.LittleEndian
	d := make([]byte, 100*512)
	d[446+4] = 0xee
	le.PutUint32(d[446+8:], 1)
	le.PutUint32(d[446+12:], 99)
	d[510], d[511] = 0x55, 0xaa
	e := d[1024:]
	copy(e[0:], []byte{0xaf, 0x3d, 0xc6, 0x0f, 0x83, 0x84, 0x72, 0x47, 0x8e, 0x79, 0x3d, 0x69, 0xd8, 0x47, 0x7d, 0xe4}) // Linux filesystem
	e[16] = 1                                                                                                           // unique GUID, not zero
	le.PutUint64(e[32:], 34)
	le.PutUint64(e[40:], 66)
	h := d[512:]
	copy(h, "EFI PART")
	le.PutUint32(h[8:], 0x00010000)
	le.PutUint32(h[12:], 92)
	le.PutUint64(h[24:], 1)
	le.PutUint64(h[32:], 99)
	le.PutUint64(h[40:], 34)
	le.PutUint64(h[48:], 66)
	h[56] = 1
	le.PutUint64(h[72:], 2)
	le.PutUint32(h[80:], 4)
	le.PutUint32(h[84:], 128)
	le.PutUint32(h[88:], crc32.ChecksumIEEE(d[1024:1024+4*128]))
	le.PutUint32(h[16:], crc32.ChecksumIEEE(h[:92]))
	return d
}
