package kdf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/blake2b"
)

// Argon2 (RFC 9106, version 0x13) written so that a derivation can be
// stopped: golang.org/x/crypto/argon2 cannot be, and an abandoned run kept
// its memory and CPU until it finished (issue #25, bug 7). Every lane
// calls the stop function every stopCheckBlocks blocks, a few tens of
// microseconds of work, so even a 4 GiB derivation notices a cancel
// within milliseconds; then all lanes return, and the memory is wiped and
// unmapped (allocBlocks) before the call returns.

// ErrStopped is what Argon2KeyStop returns when its stop function said so.
var ErrStopped = errors.New("kdf: derivation stopped")

const (
	argon2Version   = 0x13
	blockWords      = 128 // 1 KiB blocks of 64-bit words
	syncPoints      = 4   // slices per pass
	stopCheckBlocks = 64  // blocks between polls of the stop flag

	// Argon2 types as H0 and the address generator encode them.
	argon2TypeD  = 0
	argon2TypeI  = 1
	argon2TypeID = 2
)

type block [blockWords]uint64

// contextStop is a stop function for ctx, nil if ctx never ends. It polls
// ctx.Done directly rather than through context.AfterFunc, which would
// need one more goroutine scheduled, behind the busy lanes, before anyone
// noticed; and it reads the clock against ctx's deadline, which does not
// wait for ctx's own timer goroutine to be scheduled either.
func contextStop(ctx context.Context) func() bool {
	done := ctx.Done()
	if done == nil {
		return nil
	}
	deadline, hasDeadline := ctx.Deadline()
	return func() bool {
		select {
		case <-done:
			return true
		default:
		}
		return hasDeadline && !time.Now().Before(deadline)
	}
}

// contextErr is ctx's error after contextStop said to stop: ctx.Err(),
// or the DeadlineExceeded it is about to report when the clock passed the
// deadline first.
func contextErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return context.DeadlineExceeded
}

// Argon2Key derives keyLen bytes with typ (Argon2i or Argon2id), time
// passes over memoryKiB KiB in parallel lanes, as cryptsetup's argon2
// does (no secret, no associated data). It stops with ctx's error when ctx
// ends, leaving nothing running.
func Argon2Key(ctx context.Context, typ string, password, salt []byte, time, memoryKiB, parallel uint32, keyLen int) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	stop := contextStop(ctx)
	k, err := Argon2KeyStop(stop, typ, password, salt, time, memoryKiB, parallel, keyLen)
	if errors.Is(err, ErrStopped) {
		return nil, contextErr(ctx)
	}
	return k, err
}

// Argon2KeyStop is Argon2Key that polls stop (nil: never stops) instead
// of watching a context, for searches that share one flag among many
// derivations. It returns ErrStopped once stop returns true.
func Argon2KeyStop(stop func() bool, typ string, password, salt []byte, time, memoryKiB, parallel uint32, keyLen int) ([]byte, error) {
	var mode uint32
	switch typ {
	case Argon2i:
		mode = argon2TypeI
	case Argon2id:
		mode = argon2TypeID
	default:
		return nil, fmt.Errorf("%w: argon2 type %q", ErrUnsupported, typ)
	}
	if time < 1 || parallel < 1 || parallel > 255 || keyLen < 1 || keyLen > 1<<30 || memoryKiB > MaxArgon2MemoryKiB {
		return nil, fmt.Errorf("%w: argon2 time %d, memory %d KiB, %d lanes, key length %d", ErrInvalid, time, memoryKiB, parallel, keyLen)
	}
	return argon2Derive(stop, mode, password, salt, nil, nil, time, memoryKiB, parallel, uint32(keyLen))
}

// argon2Derive is Argon2 with every input of RFC 9106 (secret and
// associated data too, which the RFC's vectors use). It returns
// ErrStopped when stop returned true. Like golang.org/x/crypto/argon2
// (and so like the keys blkcrypt derived before) it raises memory below
// 8 KiB a lane to that instead of refusing it; callers that must refuse
// check first.
func argon2Derive(stop func() bool, mode uint32, password, salt, secret, data []byte, time, memory, lanes, keyLen uint32) ([]byte, error) {
	h0 := argon2H0(mode, password, salt, secret, data, time, memory, lanes, keyLen)
	defer clear(h0[:])

	// m' = 4 * p * floor(m / 4p), at least 2 blocks a segment.
	memory = memory / (syncPoints * lanes) * (syncPoints * lanes)
	if memory < 2*syncPoints*lanes {
		memory = 2 * syncPoints * lanes
	}
	laneLen := memory / lanes
	if stopped(stop) {
		return nil, ErrStopped
	}
	B, free, err := allocBlocks(int(memory))
	if err != nil {
		return nil, err
	}
	// The blocks hold password-derived state: wipe them whatever happens,
	// then free them. Only the blocks written so far are wiped: clearing
	// the rest would fault in pages never used, which for a derivation
	// stopped early is most of them and takes far longer than the cancel
	// may.
	written := make([]uint32, lanes) // blocks written at the start of each lane
	defer func() {
		wipeBlocks(B, laneLen, written)
		free()
	}()

	var buf [blockWords * 8]byte
	var in [blake2b.Size + 8]byte
	copy(in[:], h0[:])
	for l := uint32(0); l < lanes; l++ {
		binary.LittleEndian.PutUint32(in[blake2b.Size+4:], l)
		for i := uint32(0); i < 2; i++ {
			binary.LittleEndian.PutUint32(in[blake2b.Size:], i)
			argon2HPrime(buf[:], in[:])
			b := &B[l*laneLen+i]
			for w := range b {
				b[w] = binary.LittleEndian.Uint64(buf[w*8:])
			}
		}
		written[l] = 2
	}
	clear(buf[:])
	clear(in[:])

	segLen := laneLen / syncPoints
	for pass := uint32(0); pass < time; pass++ {
		for slice := uint32(0); slice < syncPoints; slice++ {
			var wg sync.WaitGroup
			var halted atomic.Bool
			seg := func(l uint32) {
				next, ok := fillSegment(B, stop, mode, time, memory, lanes, laneLen, segLen, pass, slice, l)
				if pass == 0 {
					written[l] = slice*segLen + next
				}
				if !ok {
					halted.Store(true)
				}
			}
			for l := uint32(1); l < lanes; l++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					seg(l)
				}()
			}
			// Lane 0 runs here: one goroutine fewer to start each slice.
			seg(0)
			wg.Wait()
			if halted.Load() {
				return nil, ErrStopped
			}
		}
	}

	// Final block: XOR of every lane's last block.
	var c block
	defer clear(c[:])
	for l := uint32(0); l < lanes; l++ {
		last := &B[l*laneLen+laneLen-1]
		for w := range c {
			c[w] ^= last[w]
		}
	}
	for w := range c {
		binary.LittleEndian.PutUint64(buf[w*8:], c[w])
	}
	defer clear(buf[:])
	out := make([]byte, keyLen)
	argon2HPrime(out, buf[:])
	return out, nil
}

func stopped(stop func() bool) bool { return stop != nil && stop() }

// argon2H0 is H0 of RFC 9106 section 3.2: BLAKE2b-512 of the parameters
// and the length-prefixed inputs.
func argon2H0(mode uint32, password, salt, secret, data []byte, time, memory, lanes, keyLen uint32) (h0 [blake2b.Size]byte) {
	h, _ := blake2b.New512(nil)
	var n [4]byte
	le32 := func(v uint32) {
		binary.LittleEndian.PutUint32(n[:], v)
		h.Write(n[:])
	}
	le32(lanes)
	le32(keyLen)
	le32(memory)
	le32(time)
	le32(argon2Version)
	le32(mode)
	for _, s := range [][]byte{password, salt, secret, data} {
		le32(uint32(len(s)))
		h.Write(s)
	}
	h.Sum(h0[:0])
	h.Reset() // drop the password-derived chaining state
	return h0
}

// argon2HPrime is the variable-length hash H' of RFC 9106 section 3.3,
// filling out from in.
func argon2HPrime(out, in []byte) {
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(out)))
	if len(out) <= blake2b.Size {
		h, _ := blake2b.New(len(out), nil)
		h.Write(n[:])
		h.Write(in)
		h.Sum(out[:0])
		h.Reset()
		return
	}
	var v [blake2b.Size]byte
	defer clear(v[:])
	h, _ := blake2b.New512(nil)
	defer h.Reset()
	h.Write(n[:])
	h.Write(in)
	h.Sum(v[:0])
	// r = ceil(T/32) - 2 full hashes give 32 bytes each; the last gives
	// the remaining T - 32r bytes.
	r := (len(out)+31)/32 - 2
	copy(out, v[:32])
	for i := 1; i < r; i++ {
		h.Reset()
		h.Write(v[:])
		h.Sum(v[:0])
		copy(out[i*32:], v[:32])
	}
	last := len(out) - 32*r
	var hl hash.Hash = h
	if last != blake2b.Size {
		hl, _ = blake2b.New(last, nil)
		defer hl.Reset()
	} else {
		h.Reset()
	}
	hl.Write(v[:])
	hl.Sum(out[32*r : 32*r])
}

// fillSegment computes one segment (lane l of one slice of one pass). It
// returns the index in the segment of the first block it did not write,
// and false if stop said to stop.
func fillSegment(B []block, stop func() bool, mode, time, memory, lanes, laneLen, segLen, pass, slice, l uint32) (uint32, bool) {
	// Argon2i, and Argon2id in the first half of the first pass, take
	// reference indices from a generator that does not depend on the
	// password (section 3.4.1.2); otherwise from the previous block.
	independent := mode == argon2TypeI || mode == argon2TypeID && pass == 0 && slice < syncPoints/2
	var addr, input, zero block
	if independent {
		input[0] = uint64(pass)
		input[1] = uint64(l)
		input[2] = uint64(slice)
		input[3] = uint64(memory)
		input[4] = uint64(time)
		input[5] = uint64(mode)
	}
	nextAddresses := func() {
		input[6]++
		processBlock(&addr, &input, &zero, false)
		processBlock(&addr, &addr, &zero, false)
	}
	start := uint32(0)
	if pass == 0 && slice == 0 {
		start = 2 // B[l][0] and B[l][1] come from H0
		if independent {
			nextAddresses()
		}
	}
	laneBase := l * laneLen
	offset := laneBase + slice*segLen + start
	for i := start; i < segLen; i, offset = i+1, offset+1 {
		if i%stopCheckBlocks == 0 && stopped(stop) {
			return i, false
		}
		prev := offset - 1
		if offset == laneBase {
			prev = laneBase + laneLen - 1
		}
		var rnd uint64
		if independent {
			if i%blockWords == 0 {
				nextAddresses()
			}
			rnd = addr[i%blockWords]
		} else {
			rnd = B[prev][0]
		}
		j1, j2 := uint32(rnd), uint32(rnd>>32)

		// Section 3.4.2: the reference lane, then the set of blocks W the
		// reference may come from, then the position in W.
		refLane := j2 % lanes
		if pass == 0 && slice == 0 {
			refLane = l
		}
		var area uint32 // |W|
		switch {
		case pass == 0 && refLane == l:
			area = slice*segLen + i - 1
		case pass == 0:
			area = slice * segLen
			if i == 0 {
				area--
			}
		case refLane == l:
			area = laneLen - segLen + i - 1
		default:
			area = laneLen - segLen
			if i == 0 {
				area--
			}
		}
		x := uint64(j1) * uint64(j1) >> 32
		y := uint64(area) * x >> 32
		rel := uint64(area) - 1 - y
		var startPos uint64
		if pass != 0 && slice != syncPoints-1 {
			startPos = uint64(slice+1) * uint64(segLen)
		}
		ref := refLane*laneLen + uint32((startPos+rel)%uint64(laneLen))

		// Version 0x13 XORs the new block into the old one after the
		// first pass.
		processBlock(&B[offset], &B[prev], &B[ref], pass != 0)
	}
	return segLen, true
}

// wipeBlocks clears the first written[l] blocks of every lane of B, in
// parallel when there is much of it: clearing a GiB on one core takes
// tens of milliseconds.
func wipeBlocks(B []block, laneLen uint32, written []uint32) {
	const piece = 1 << 14 // 16 MiB
	var parts [][]block
	for l, n := range written {
		lane := B[uint32(l)*laneLen : uint32(l)*laneLen+n]
		for len(lane) > piece {
			parts = append(parts, lane[:piece])
			lane = lane[piece:]
		}
		parts = append(parts, lane)
	}
	workers := min(len(parts), runtime.GOMAXPROCS(0))
	if workers <= 1 {
		for _, p := range parts {
			clear(p)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(len(parts)); i = next.Add(1) - 1 {
				clear(parts[i])
			}
		}()
	}
	wg.Wait()
}
