package luks2

import (
	"fmt"
	"hash"
	"sync"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
)

// The offline run's read-ahead: while one hotzone is encrypted, written
// and committed, a goroutine reads the next one, computes its resilience
// data from the old ciphertext and decrypts it, so reading and decryption
// overlap the writes, syncs and commits of the step before (the sector
// engine shares each batch between both cores as well).
//
// Both sides work a hotzone in pieces of pieceSize: a 32 MiB hotzone
// does not fit in any cache, so reading, hashing and decrypting it whole
// (and encrypting and writing it whole) took each byte through memory
// five times; piece by piece, each byte is read in and written out once
// and the passes between run in cache. The hotzone buffers are reused
// (hotzoneBuffers of them), so no step pays for faulting in and zeroing
// fresh memory. Neither changes what reaches the device or when: the
// resilience data still covers the whole hotzone and is written and
// committed before any of its pieces.

// pieceSize is the bytes read, hashed and decrypted (or encrypted and
// written) at a time; a multiple of every sector and hash block size.
const pieceSize = 1 << 20

// hotzoneBuffers is one hotzone being written, one ready and one being
// read.
const hotzoneBuffers = 3

// preparedChunk is one hotzone read and decrypted ahead of its turn.
type preparedChunk struct {
	off   uint64
	prot  []byte // resilience data (checksums, or the journal: the old ciphertext)
	plain []byte // the hotzone decrypted with the old key
	err   error
}

// bufferPool hands out up to hotzoneBuffers hotzone buffers and takes
// them back once written.
type bufferPool struct {
	free chan []byte
	made int
	size uint64
}

func newBufferPool(size uint64) *bufferPool {
	return &bufferPool{free: make(chan []byte, hotzoneBuffers), size: size}
}

// get returns a buffer of n bytes, or nil once stop is closed.
func (p *bufferPool) get(n uint64, stop <-chan struct{}) []byte {
	select {
	case b := <-p.free:
		return b[:n]
	default:
	}
	if p.made < hotzoneBuffers {
		p.made++
		return make([]byte, n, p.size)
	}
	select {
	case b := <-p.free:
		return b[:n]
	case <-stop:
		return nil
	}
}

// put gives a written buffer back; it never blocks.
func (p *bufferPool) put(b []byte) {
	if p == nil || b == nil {
		return
	}
	select {
	case p.free <- b[:cap(b)]:
	default:
	}
}

// resilienceData is what protect writes for raw, the old ciphertext:
// the checksums of its blocks, raw itself for a journal, nil for none.
func (r *reenc) resilienceData(raw []byte) []byte {
	switch r.resilience {
	case "checksum":
		hf, _ := hashByName(r.hash)
		return r.appendSums(nil, raw, hf)
	case "journal":
		return raw
	}
	return nil
}

// appendSums appends the checksum of each block of raw to sums. A large
// raw is hashed by two goroutines (hashing is most of checksum mode's
// work), each on its half, into sums' two halves.
func (r *reenc) appendSums(sums, raw []byte, hf func() hash.Hash) []byte {
	count := len(raw) / r.block
	hs := hf().Size()
	at := len(sums)
	sums = append(sums, make([]byte, count*hs)...)
	one := func(from, to int) {
		hh := hf()
		for i := from; i < to; i++ {
			hh.Reset()
			hh.Write(raw[i*r.block : (i+1)*r.block])
			hh.Sum(sums[at+i*hs : at+i*hs : at+(i+1)*hs])
		}
	}
	if count < 64 {
		one(0, count)
		return sums
	}
	var wg sync.WaitGroup
	half := count / 2
	wg.Add(1)
	go func() { defer wg.Done(); one(half, count) }()
	one(0, half)
	wg.Wait()
	return sums
}

// writeResilience writes and syncs the resilience data of a hotzone.
func (r *reenc) writeResilience(dev Device, prot []byte) error {
	if prot == nil {
		return nil
	}
	return luksutil.WriteSync(dev, prot, int64(r.areaOff))
}

// readAhead sends each hotzone from start on, prepared, until the end, a
// read error or stop. The ranges it reads are not written until their
// turn, so what it reads is the old ciphertext.
func (r *reenc) readAhead(data Device, start, hz uint64, pool *bufferPool, next chan<- preparedChunk, stop <-chan struct{}) {
	hf, _ := hashByName(r.hash)
	for off := start; off < r.size; {
		n := min(hz, r.size-off)
		buf := pool.get(n, stop)
		if buf == nil {
			return
		}
		c := preparedChunk{off: off, plain: buf}
		switch r.resilience {
		case "checksum":
			c.prot = make([]byte, 0, int(n)/r.block*hf().Size())
		case "journal":
			c.prot = make([]byte, n)
		}
		for p := uint64(0); p < n && c.err == nil; p += pieceSize {
			k := min(pieceSize, n-p)
			piece := buf[p : p+k]
			if _, c.err = readFull(data, piece, int64(r.dataOff+off+p)); c.err != nil {
				break
			}
			switch r.resilience {
			case "checksum":
				c.prot = r.appendSums(c.prot, piece, hf)
			case "journal":
				copy(c.prot[p:], piece) // the journal is the ciphertext itself
			}
			c.err = r.oldC.DecryptSectors(piece, piece, (off+p)/512)
		}
		select {
		case next <- c:
		case <-stop:
			clear(c.plain)
			return
		}
		if c.err != nil {
			return
		}
		off += n
	}
	close(next)
}

// writeHotzone encrypts the decrypted hotzone plain, at off of the data,
// with the new key and writes it, piece by piece.
func (r *reenc) writeHotzone(data Device, plain []byte, off uint64) error {
	for p := 0; p < len(plain); p += pieceSize {
		piece := plain[p:min(p+pieceSize, len(plain))]
		at := off + uint64(p)
		if err := r.newC.EncryptSectors(piece, piece, at/512); err != nil {
			return err
		}
		if _, err := data.WriteAt(piece, int64(r.dataOff+at)); err != nil {
			return fmt.Errorf("writing the hotzone at %d: %w", r.dataOff+at, err)
		}
	}
	return nil
}
