package aead

import (
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"
)

// Sectors is AEGIS-128 over many messages at once: dm-crypt's sectors,
// each with its own nonce and associated data. The messages are
// independent, so the VAES kernel runs four or eight of them side by
// side, one per 128-bit lane of a ZMM register, where a single message
// leaves the AES unit waiting on its own latency.
//
// n messages of equal length lie back to back in src and dst (dst and
// src are the same slice or do not overlap), their nonces (16 bytes
// each) in nonces, their associated data (of equal length) in ad, their
// tags (the AEAD's tag size each) in tags.
type Sectors interface {
	// SealSectors encrypts src into dst and writes the tags.
	SealSectors(dst, tags, src, nonces, ad []byte, n int) error
	// OpenSectors checks the tags and decrypts src into dst. A message
	// whose tag does not verify stops the call with an *OpenError
	// naming it (errors.Is ErrOpen); dst then holds zeros in place of
	// it and of every message after it.
	OpenSectors(dst, src, tags, nonces, ad []byte, n int) error
}

// OpenError is the error of OpenSectors: message Index (from 0) did not
// verify.
type OpenError struct{ Index int }

func (e *OpenError) Error() string {
	return fmt.Sprintf("aead: message %d: authentication failed", e.Index)
}

func (e *OpenError) Unwrap() error { return ErrOpen }

var errSectorArgs = errors.New("aead: invalid multi-message arguments")

func (a *aegis128) SealSectors(dst, tags, src, nonces, ad []byte, n int) error {
	if err := a.checkSectors(dst, tags, src, nonces, ad, n); err != nil {
		return err
	}
	if n > 0 {
		a.run(a.plan, false, dst, tags, src, nonces, ad, n)
	}
	return nil
}

func (a *aegis128) OpenSectors(dst, src, tags, nonces, ad []byte, n int) error {
	if err := a.checkSectors(dst, tags, src, nonces, ad, n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	return a.run(a.plan, true, dst, tags, src, nonces, ad, n)
}

func (a *aegis128) checkSectors(dst, tags, src, nonces, ad []byte, n int) error {
	switch {
	case n < 0 || n == 0 && len(src)+len(dst)+len(tags)+len(nonces)+len(ad) != 0:
		return fmt.Errorf("%w: %d messages", errSectorArgs, n)
	case n == 0:
		return nil
	case len(src)%n != 0 || len(ad)%n != 0:
		return fmt.Errorf("%w: %d data and %d associated bytes are not %d equal messages", errSectorArgs, len(src), len(ad), n)
	case len(dst) != len(src):
		return fmt.Errorf("%w: dst holds %d bytes, src %d", errSectorArgs, len(dst), len(src))
	case len(nonces) != n*AEGIS128NonceSize:
		return fmt.Errorf("%w: %d nonce bytes for %d messages", errSectorArgs, len(nonces), n)
	case len(tags) != n*a.tagSize:
		return fmt.Errorf("%w: %d tag bytes for %d messages of %d-byte tags", errSectorArgs, len(tags), n, a.tagSize)
	case inexactOverlap(dst, src):
		return fmt.Errorf("%w: dst and src overlap", errSectorArgs)
	}
	return nil
}

// inexactOverlap reports whether x and y share memory other than at the
// same start (crypto/internal/alias's rule: in place is allowed).
func inexactOverlap(x, y []byte) bool {
	if len(x) == 0 || len(y) == 0 || &x[0] == &y[0] {
		return false
	}
	xs, ys := uintptr(unsafe.Pointer(&x[0])), uintptr(unsafe.Pointer(&y[0]))
	return xs < ys+uintptr(len(y)) && ys < xs+uintptr(len(x))
}

// job is lanes messages for one kernel run; the assembly kernels read it
// at the offsets aegis_amd64.s defines (TestJobLayout). Lane l's message
// is src[l*stride:], blocks full 16-byte blocks, then, when tail is not
// empty, the zero-padded last partial block tail[16*l:], which the
// kernel replaces with its output (decryption zeroes it past the
// message with tailMask). The associated data is adBlocks zero-padded
// blocks, block-major: block b of lane l at ad[16*(b*lanes+l):], so one
// wide load reads a block of every lane.
type job struct {
	src, dst []byte
	nonces   []byte // lanes*16
	ad       []byte
	tail     []byte // lanes*16 or empty
	tags     []byte // lanes*16, written
	stride   int
	blocks   int
	adBlocks int
	key      [16]byte
	lenBlock [16]byte // the final block: bit lengths of ad and message
	tailMask [16]byte // 0xff over the tail's bytes
	lanes    int
}

// kernel is one implementation of a job.
type kernel int

const (
	kernelGeneric kernel = iota // Go, any number of lanes (up to maxLanes a run)
	kernelAESNI                 // one lane
	kernelVAES4                 // four lanes
	kernelVAES8                 // eight lanes
)

const maxLanes = 8

var kernelNames = [...]string{"generic", "aesni", "vaes4", "vaes8"}

func (k kernel) String() string { return kernelNames[k] }

// lanes is the number of messages a run takes (the generic code takes
// any from 1 to maxLanes).
func (k kernel) lanes() int { return [...]int{1, 1, 4, 8}[k] }

func (k kernel) run(j *job, open bool) {
	switch {
	case k == kernelGeneric:
		runGeneric(j, open)
	case k == kernelAESNI && open:
		openAESNI(j)
	case k == kernelAESNI:
		sealAESNI(j)
	case k == kernelVAES4 && open:
		openVAES4(j)
	case k == kernelVAES4:
		sealVAES4(j)
	case k == kernelVAES8 && open:
		openVAES8(j)
	default:
		sealVAES8(j)
	}
}

// A plan is the kernels a call may use, widest first; the last takes a
// single message, so every count is covered.
var defaultPlan = func() []kernel {
	switch {
	case useVAES:
		return []kernel{kernelVAES8, kernelVAES4, kernelAESNI}
	case useAESNI:
		return []kernel{kernelAESNI}
	}
	return []kernel{kernelGeneric}
}()

// run seals or opens n messages (arguments as Sectors's, checked) with
// the widest kernels of plan that fit the messages left.
func (a *aegis128) run(plan []kernel, open bool, dst, tags, src, nonces, ad []byte, n int) error {
	msgLen, adLen := len(src)/n, len(ad)/n
	tailLen := msgLen % 16
	j := job{stride: msgLen, blocks: msgLen / 16, adBlocks: (adLen + 15) / 16}
	store(j.key[:], a.key)
	binary.LittleEndian.PutUint64(j.lenBlock[:8], uint64(adLen)*8)
	binary.LittleEndian.PutUint64(j.lenBlock[8:], uint64(msgLen)*8)
	for i := range tailLen {
		j.tailMask[i] = 0xff
	}
	var tailBuf, tagBuf [maxLanes * 16]byte
	defer clear(tailBuf[:]) // plaintext
	var adSmall [2 * maxLanes * 16]byte
	adBuf := adSmall[:]
	if need := j.adBlocks * min(n, maxLanes) * 16; need > len(adBuf) {
		adBuf = make([]byte, need)
	}
	ts := a.tagSize
	for i := 0; i < n; {
		k := plan[len(plan)-1]
		for _, p := range plan {
			if p.lanes() <= n-i {
				k = p
				break
			}
		}
		lanes := k.lanes()
		if k == kernelGeneric {
			lanes = min(maxLanes, n-i)
		}
		j.lanes = lanes
		j.src, j.dst = src[i*msgLen:], dst[i*msgLen:]
		j.nonces = nonces[16*i : 16*(i+lanes)]
		j.ad = adBuf[:j.adBlocks*lanes*16]
		clear(j.ad)
		for l := range lanes {
			m := ad[(i+l)*adLen : (i+l+1)*adLen]
			for b := 0; b < j.adBlocks; b++ {
				copy(j.ad[16*(b*lanes+l):16*(b*lanes+l+1)], m[16*b:])
			}
		}
		j.tail = nil
		if tailLen > 0 {
			j.tail = tailBuf[:16*lanes]
			clear(j.tail)
			for l := range lanes {
				end := (i + l + 1) * msgLen
				copy(j.tail[16*l:], src[end-tailLen:end])
			}
		}
		j.tags = tagBuf[:16*lanes]
		k.run(&j, open)
		for l := range lanes {
			if tailLen > 0 {
				end := (i + l + 1) * msgLen
				copy(dst[end-tailLen:end], j.tail[16*l:])
			}
			tag := tags[(i+l)*ts : (i+l+1)*ts]
			if !open {
				copy(tag, j.tags[16*l:])
			} else if subtle.ConstantTimeCompare(j.tags[16*l:16*l+ts], tag) != 1 {
				clear(dst[(i+l)*msgLen:])
				return &OpenError{Index: i + l}
			}
		}
		i += lanes
	}
	return nil
}

// runGeneric is the Go code of every kernel: AEGIS-128 as the
// specification writes it, lane after lane.
func runGeneric(j *job, open bool) {
	key := load(j.key[:])
	for l := range j.lanes {
		kn := xor(key, load(j.nonces[16*l:]))
		s := aegisState{kn, aegisConst[1], aegisConst[0], xor(key, aegisConst[0]), xor(key, aegisConst[1])}
		for range 5 {
			s.update(key)
			s.update(kn)
		}
		for b := range j.adBlocks {
			s.update(load(j.ad[16*(b*j.lanes+l):]))
		}
		src, dst := j.src[l*j.stride:], j.dst[l*j.stride:]
		for b := range j.blocks {
			in := load(src[16*b:])
			out := xor(in, s.keystream())
			store(dst[16*b:], out)
			if open {
				s.update(out)
			} else {
				s.update(in)
			}
		}
		if len(j.tail) > 0 {
			t := j.tail[16*l : 16*l+16]
			in := load(t)
			out := xor(in, s.keystream())
			if open {
				mask := load(j.tailMask[:])
				out = words{out[0] & mask[0], out[1] & mask[1], out[2] & mask[2], out[3] & mask[3]}
				s.update(out)
			} else {
				s.update(in)
			}
			store(t, out)
		}
		t := xor(load(j.lenBlock[:]), s[3])
		for range 7 {
			s.update(t)
		}
		store(j.tags[16*l:], xor(xor(xor(s[0], s[1]), xor(s[2], s[3])), s[4]))
	}
}
