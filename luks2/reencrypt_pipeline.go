package luks2

import (
	"cmp"
	"fmt"
	"hash"
	"sync"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
)

// The offline run's read-ahead: while one hotzone is transformed, written
// and committed, a goroutine reads the next one and computes its
// resilience data from the old data, so reading and hashing overlap
// the writes, syncs and commits of the step before (the sector engine
// shares each batch between both cores as well).
//
// Both sides work in pieces of pieceSize: a 32 MiB hotzone does not fit
// in any cache, so reading, hashing and decrypting it whole (and
// encrypting and writing it whole) took each byte through memory at
// every pass; piece by piece the passes between the read and the write
// run in cache. For checksum (the default) the reader keeps only the
// checksums, and the writer reads each piece again after the commit,
// decrypts, encrypts and writes it: a second read of the page cache costs
// less than holding the hotzone (0.24 s against 0.28 s for 256 MiB on
// tmpfs, a third fewer page faults). For journal (whose data is the
// whole old ciphertext anyway) and none the reader also decrypts, into
// reused hotzone buffers (hotzoneBuffers of them), so no step faults in
// fresh memory. None of it changes what reaches the device or when: the
// resilience data still covers the whole hotzone and is written and
// committed before any of its pieces.

// pieceSize is the bytes read, hashed and decrypted (or encrypted and
// written) at a time; a multiple of every sector and hash block size.
// A variable for the power-cut test with several pieces per hotzone.
var pieceSize = 1 << 20

// hotzoneBuffers is one hotzone being written and one being read: the
// writer hands its buffer back before its sync and commit, so the reader
// seldom waits, and a third (24,000 page faults for 32 MiB hotzones
// where two take 16,000) bought no speed.
const hotzoneBuffers = 2

// preparedChunk is one hotzone read and decrypted ahead of its turn.
type preparedChunk struct {
	off     uint64
	n       uint64 // the hotzone's length
	prot    []byte // resilience data (checksums, or the journal: the old data)
	plain   []byte // the hotzone decrypted with the old key (nil for checksum: read again)
	err     error
	stopped bool // the run ended while it was read
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

// sumsInto writes the checksum of each block of raw into sums, which
// holds one hash per block.
func (e *engine) sumsInto(sums, raw []byte, hf func() hash.Hash) {
	hh := hf()
	hs := hh.Size()
	for i := 0; (i+1)*e.block <= len(raw); i++ {
		hh.Reset()
		hh.Write(raw[i*e.block : (i+1)*e.block])
		hh.Sum(sums[i*hs : i*hs : (i+1)*hs])
	}
}

// writeResilience writes and syncs the resilience data of a hotzone.
func (e *engine) writeResilience(prot []byte) error {
	if prot == nil {
		return nil
	}
	return luksutil.WriteSync(e.dev, prot, int64(e.areaOff))
}

// readAhead sends each planned hotzone, prepared, in order, until the
// plan ends, a read fails or stop closes; it closes next when done. The
// ranges it reads are not written until their turn, so what it reads is
// the old data.
func (e *engine) readAhead(plan [][2]uint64, pool *bufferPool, next chan<- preparedChunk, stop <-chan struct{}) {
	defer close(next)
	for _, p := range plan {
		c := e.prepareChunk(p[0], p[1], pool, stop)
		if c.stopped {
			return
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
	}
}

// prepareChunk reads the hotzone [off,off+n) and computes its resilience
// data: for checksum protection only the checksums (the writer reads the
// data again), else the old data too, decrypted, in a buffer of pool.
func (e *engine) prepareChunk(off, n uint64, pool *bufferPool, stop <-chan struct{}) preparedChunk {
	c := preparedChunk{off: off, n: n}
	if e.protection(off) == "checksum" {
		c.prot, c.err = e.checksums(off, n, stop)
		c.stopped = c.err == errStopAfter
		return c
	}
	if c.plain = pool.get(n, stop); c.plain == nil {
		c.stopped = true
		return c
	}
	c.prot, c.err = e.prepare(c.plain, off)
	return c
}

// piecesInFlight is how many read pieces are hashed and decrypted at once
// while the next one is read: the read (a copy in the kernel) and the
// hashing (most of checksum mode's work) then run on both cores instead
// of one after the other.
const piecesInFlight = 2

// prepare reads the hotzone at off into buf piece by piece and returns
// its resilience data (a journal: the old data itself), buf decrypted
// with the old key when it has one.
func (e *engine) prepare(buf []byte, off uint64) ([]byte, error) {
	var prot []byte
	journal := e.protection(off) == "journal"
	if journal {
		prot = make([]byte, len(buf))
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	slots := make(chan struct{}, piecesInFlight)
	for p := 0; p < len(buf); p += pieceSize {
		piece := buf[p:min(p+pieceSize, len(buf))]
		if _, err := readFull(e.data, piece, int64(e.src(off)+uint64(p))); err != nil {
			wg.Wait()
			return nil, err
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			if journal {
				copy(prot[p:], piece)
			}
			if e.from.c == nil {
				return
			}
			if err := e.from.c.DecryptSectors(piece, piece, (off+uint64(p))/512); err != nil {
				mu.Lock()
				firstErr = cmp.Or(firstErr, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return prot, firstErr
}

// writeHotzone encrypts the decrypted hotzone plain of logical offset
// off with the new key (when it has one) and writes it to its
// destination, piece by piece.
func (e *engine) writeHotzone(plain []byte, off uint64) error {
	for p := 0; p < len(plain); p += pieceSize {
		piece := plain[p:min(p+pieceSize, len(plain))]
		at := off + uint64(p)
		if e.to.c != nil {
			if err := e.to.c.EncryptSectors(piece, piece, at/512); err != nil {
				return err
			}
		}
		if _, err := e.data.WriteAt(piece, int64(e.dst(at))); err != nil {
			return fmt.Errorf("writing the hotzone at %d: %w", e.dst(at), err)
		}
	}
	return nil
}

// checksums reads the hotzone at off, n bytes, piece by piece and returns
// the checksums of its blocks; the data itself is not kept but read
// again by the writer (rewriteHotzone) once the checksums are committed.
// A 32 MiB hotzone held whole missed the cache at every pass (and faulted
// in its buffers); pieces read twice stay in it.
func (e *engine) checksums(off, n uint64, stop <-chan struct{}) ([]byte, error) {
	hf, _ := hashByName(e.hash)
	hs := hf().Size()
	sums := make([]byte, int(n)/e.block*hs)
	bufs := make(chan []byte, piecesInFlight+1)
	for range piecesInFlight + 1 {
		bufs <- make([]byte, pieceSize)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for p := 0; p < int(n); p += pieceSize {
		var buf []byte
		select {
		case buf = <-bufs:
		case <-stop:
			return nil, errStopAfter // the run has ended; nobody reads this
		}
		piece := buf[:min(pieceSize, int(n)-p)]
		if _, err := readFull(e.data, piece, int64(e.src(off)+uint64(p))); err != nil {
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.sumsInto(sums[p/e.block*hs:], piece, hf)
			bufs <- buf
		}()
	}
	wg.Wait()
	return sums, nil
}

// rewriteHotzone reads the hotzone at off again, piece by piece into
// piece, decrypts it with the old key and encrypts and writes it with the
// new one (checksum protection is only ever in place).
func (e *engine) rewriteHotzone(off, n uint64, piece []byte) error {
	for p := uint64(0); p < n; p += uint64(len(piece)) {
		b := piece[:min(uint64(len(piece)), n-p)]
		if _, err := readFull(e.data, b, int64(e.src(off)+p)); err != nil {
			return fmt.Errorf("reading the hotzone at %d: %w", e.src(off)+p, err)
		}
		if e.from.c != nil {
			if err := e.from.c.DecryptSectors(b, b, (off+p)/512); err != nil {
				return err
			}
		}
		if err := e.writeHotzone(b, off+p); err != nil {
			return err
		}
	}
	return nil
}
