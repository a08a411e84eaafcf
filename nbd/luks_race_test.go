package nbd

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/kdf"
)

// TestConcurrentClientsLUKS: NBD clients hammer a LUKS2 volume
// (blkcrypt.Volume, 4096-byte sectors) at the same time, in two regions:
//
//   - the "stamped" half gets overlapping multi-block writes, write-zeroes,
//     reads and flushes from every client. Every block a write puts down is
//     self-describing (writer, sequence, block number, then bytes derived
//     from them), so a block seen by a concurrent read or at the end must be
//     whole and one some request wrote there: no torn sector, no block from
//     elsewhere.
//   - the "shared-sector" half gets 64-byte writes from two clients that
//     did not agree on a block size (so the server passes unaligned
//     requests on): each writer lane owns every sixth 64-byte stripe, so
//     every 4096-byte sector is shared by all lanes and each write is a
//     read-modify-write of a sector others are changing. A lane must always
//     read back exactly what it wrote: an update lost to another lane's
//     read-modify-write shows up at once. (Without the Volume's range locks
//     this fails within a few hundred writes.)
//
// A fresh open of the image must then show what the clients see.
// scripts/test.sh runs this package under -race, which covers the server,
// the Volume's range locks and the sector engine.
func TestConcurrentClientsLUKS(t *testing.T) {
	const (
		block   = 4096
		nblocks = 36 // a small data area, so requests overlap a lot
		shared  = 4  // blocks [0, shared) are the shared-sector region
		lanes   = 3  // writer goroutines per client
		ops     = 100
		stripe  = 64
	)
	dir := t.TempDir()
	img := filepath.Join(dir, "luks.img")
	pass := []byte("race test passphrase")
	fast := blkcrypt.PBKDFOptions{Type: kdf.PBKDF2, Iterations: 1000}
	if err := blkcrypt.Format(context.Background(), img, pass, blkcrypt.FormatOptions{Size: 16<<20 + nblocks*block, SectorSize: block, PBKDF: fast}); err != nil {
		t.Fatal(err)
	}
	v, err := blkcrypt.Open(context.Background(), img, blkcrypt.OpenOptions{Passphrase: pass})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() }) // after the server's cleanup (LIFO)
	if v.Size() != nblocks*block || v.BlockSize() != block {
		t.Fatalf("volume of %d bytes, %d-byte blocks", v.Size(), v.BlockSize())
	}

	// stamp fills one block for (writer, seq) at block number b.
	stamp := func(writer, seq uint32, b int) []byte {
		p := make([]byte, block)
		binary.LittleEndian.PutUint32(p[0:], writer)
		binary.LittleEndian.PutUint32(p[4:], seq)
		binary.LittleEndian.PutUint64(p[8:], uint64(b))
		r := rand.New(rand.NewPCG(uint64(writer)<<32|uint64(seq), uint64(b)))
		for i := 16; i < block; i += 8 {
			binary.LittleEndian.PutUint64(p[i:], r.Uint64())
		}
		return p
	}
	var mu sync.Mutex
	written := make([]map[[2]uint32]bool, nblocks) // block -> stamps written there
	zeroed := make([]bool, nblocks)
	note := func(b int, writer, seq uint32) {
		mu.Lock()
		if written[b] == nil {
			written[b] = map[[2]uint32]bool{}
		}
		written[b][[2]uint32{writer, seq}] = true
		mu.Unlock()
	}
	// check reports what is wrong with block b's content, or "".
	zero := make([]byte, block)
	check := func(p []byte, b int) string {
		if bytes.Equal(p, zero) {
			mu.Lock()
			z := zeroed[b]
			mu.Unlock()
			if z {
				return ""
			}
			return "zeroes where nobody wrote zeroes"
		}
		writer, seq := binary.LittleEndian.Uint32(p[0:]), binary.LittleEndian.Uint32(p[4:])
		if got := binary.LittleEndian.Uint64(p[8:]); got != uint64(b) {
			return fmt.Sprintf("holds block %d's data", got)
		}
		if !bytes.Equal(p, stamp(writer, seq, b)) {
			return fmt.Sprintf("torn: header says writer %d seq %d, the rest differs", writer, seq)
		}
		mu.Lock()
		ok := written[b][[2]uint32{writer, seq}]
		mu.Unlock()
		if !ok {
			return fmt.Sprintf("writer %d seq %d never wrote it", writer, seq)
		}
		return ""
	}
	// Start from a known state: writer 0 wrote every stamped block, the
	// shared-sector region is zero.
	for b := shared; b < nblocks; b++ {
		note(b, 0, 0)
		if _, err := v.WriteAt(stamp(0, 0, b), int64(b*block)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := v.WriteAt(make([]byte, shared*block), 0); err != nil {
		t.Fatal(err)
	}
	shadow := make([]byte, shared*block) // each lane writes only its stripes

	ts := startServer(t, v, Options{MultiConn: true})
	// Clients 0 and 1 did not ask for block sizes, so they may send
	// unaligned requests; client 2 agreed on 4096-byte blocks.
	clients := []*client{ts.dial(t, dialOpts{structured: true, noBlockInfo: true}), ts.dial(t, dialOpts{noBlockInfo: true}),
		ts.dial(t, dialOpts{structured: true})}
	var wg sync.WaitGroup
	for ci, cl := range clients {
		for lane := range lanes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				writer := uint32(1 + ci*lanes + lane)
				r := rand.New(rand.NewPCG(uint64(writer), 11))
				for seq := uint32(1); seq <= ops; seq++ {
					if ci < 2 && r.IntN(2) == 0 {
						// Shared-sector region: four of this lane's own
						// stripes written at once (all in flight together),
						// then read back.
						owner := ci*lanes + lane
						nstripes := shared * block / stripe / (2 * lanes)
						var offs []int
						for len(offs) < 4 {
							off := (r.IntN(nstripes)*2*lanes + owner) * stripe
							if !slices.Contains(offs, off) {
								offs = append(offs, off)
							}
						}
						var calls []*call
						var datas [][]byte
						for _, off := range offs {
							p := randBytes(uint64(writer)<<32|uint64(seq)<<8|uint64(len(calls)), stripe)
							calls = append(calls, cl.start(reqArgs{typ: cmdWrite, off: uint64(off), payload: p}))
							datas = append(datas, p)
						}
						for i, off := range offs {
							if q := calls[i].wait(t); q.err != nil || q.errno != 0 {
								t.Errorf("unaligned write: %v %d %s", q.err, q.errno, q.msg)
								return
							}
							copy(shadow[off:], datas[i])
						}
						calls = calls[:0]
						for _, off := range offs {
							calls = append(calls, cl.start(reqArgs{typ: cmdRead, off: uint64(off), length: stripe}))
						}
						for i, off := range offs {
							q := calls[i].wait(t)
							if q.err != nil || q.errno != 0 {
								t.Errorf("unaligned read: %v %d %s", q.err, q.errno, q.msg)
								return
							}
							if !bytes.Equal(q.data, shadow[off:off+stripe]) {
								t.Errorf("client %d lane %d: its bytes at %d were lost to another write", ci, lane, off)
								return
							}
						}
						continue
					}
					first := shared + r.IntN(nblocks-shared)
					n := 1 + r.IntN(min(8, nblocks-first))
					off := uint64(first * block)
					switch k := r.IntN(10); {
					case k < 5: // write
						var p []byte
						for b := first; b < first+n; b++ {
							note(b, writer, seq)
							p = append(p, stamp(writer, seq, b)...)
						}
						if q := cl.do(reqArgs{typ: cmdWrite, off: off, payload: p}); q.err != nil || q.errno != 0 {
							t.Errorf("write: %v %d %s", q.err, q.errno, q.msg)
							return
						}
					case k < 6: // write zeroes
						mu.Lock()
						for b := first; b < first+n; b++ {
							zeroed[b] = true
						}
						mu.Unlock()
						if q := cl.do(reqArgs{typ: cmdWriteZeroes, off: off, length: uint32(n * block)}); q.err != nil || q.errno != 0 {
							t.Errorf("write zeroes: %v %d %s", q.err, q.errno, q.msg)
							return
						}
					case k < 9: // read
						q := cl.do(reqArgs{typ: cmdRead, off: off, length: uint32(n * block)})
						if q.err != nil || q.errno != 0 {
							t.Errorf("read: %v %d %s", q.err, q.errno, q.msg)
							return
						}
						for i := range n {
							if why := check(q.data[i*block:(i+1)*block], first+i); why != "" {
								t.Errorf("client %d: block %d read while others write: %s", ci, first+i, why)
								return
							}
						}
					default:
						if q := cl.do(reqArgs{typ: cmdFlush}); q.err != nil || q.errno != 0 {
							t.Errorf("flush: %v %d", q.err, q.errno)
							return
						}
					}
				}
			}()
		}
	}
	wg.Wait()
	// Both clients see the same, valid, final state; so does a fresh open
	// of the image (what reached the disk decrypts to the same blocks).
	var views [][]byte
	for _, cl := range clients {
		cl.mustOK(reqArgs{typ: cmdFlush})
		views = append(views, cl.mustOK(reqArgs{typ: cmdRead, length: nblocks * block}))
		cl.disconnect()
	}
	// The server still holds the image's exclusive lock, so read it
	// through a device of our own (OpenDevice takes no lock).
	f2, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	v2, err := blkcrypt.OpenDevice(context.Background(), f2, blkcrypt.OpenOptions{Passphrase: pass, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer v2.Close()
	disk := make([]byte, nblocks*block)
	if _, err := v2.ReadAt(disk, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(views[0], views[1]) || !bytes.Equal(views[0], disk) {
		t.Fatal("the clients and a fresh open of the image disagree on the final content")
	}
	for b := shared; b < nblocks; b++ {
		if why := check(disk[b*block:(b+1)*block], b); why != "" {
			t.Errorf("final block %d: %s", b, why)
		}
	}
	if !bytes.Equal(disk[:shared*block], shadow) {
		t.Error("the shared-sector region lost writes")
	}
}
