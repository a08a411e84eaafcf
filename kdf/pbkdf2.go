package kdf

import (
	"context"
	"encoding"
	"fmt"
	"hash"
	"math"
	"reflect"
	"unsafe"
)

// The one PBKDF2 of blkcrypt: LUKS keyslots and digests use it through
// Derive, tcrypt's header search through PBKDF2Block, which computes an
// output block a stretch of iterations at a time so that derivations that
// differ only in their iteration count share the work.

// pbkdf2StopEvery is how many iterations run between polls of the stop
// function: about a millisecond of the slowest hashes (whirlpool,
// streebog), so a cancel is seen well within 100 ms even on a machine so
// busy that this thread gets a tenth of a core. A poll costs a few
// nanoseconds.
const pbkdf2StopEvery = 256

// snapshot is a hash's state right after the HMAC key block, restored at
// the start of every HMAC so that an iteration costs the compressions of
// its message only, as in any serious implementation. Hashes that are
// pointers to pointer-free structs (the stdlib's, x/crypto's, capi's
// ripemd160 and whirlpool, which do not marshal their state) are restored
// by copying the struct's bytes; others by UnmarshalBinary; the rest by
// hashing the key block again.
type snapshot struct {
	live  []byte // the hash's struct, when it is restored by copy
	saved []byte // the struct's bytes after the key block
	state []byte // MarshalBinary's state after the key block
	pad   []byte // the key block
}

func takeSnapshot(h hash.Hash, pad []byte) snapshot {
	s := snapshot{pad: append([]byte(nil), pad...)}
	v := reflect.ValueOf(h)
	if v.Kind() == reflect.Pointer && !v.IsNil() && v.Elem().Kind() == reflect.Struct && plainData(v.Elem().Type()) {
		// A pointer-free struct is a plain run of bytes: copying them is
		// what copying the struct does, without reflect on every HMAC.
		size := int(v.Elem().Type().Size())
		if size > 0 {
			s.live = unsafe.Slice((*byte)(v.UnsafePointer()), size)
			s.saved = append([]byte(nil), s.live...)
			return s
		}
	}
	if m, ok := h.(encoding.BinaryMarshaler); ok {
		if _, ok := h.(encoding.BinaryUnmarshaler); ok {
			if st, err := m.MarshalBinary(); err == nil {
				s.state = st
			}
		}
	}
	return s
}

// plainData reports whether values of t hold no pointers, so that their
// bytes are their value.
func plainData(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return true
	case reflect.Array:
		return plainData(t.Elem())
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if !plainData(t.Field(i).Type) {
				return false
			}
		}
		return true
	}
	return false
}

func (s *snapshot) restore(h hash.Hash) {
	switch {
	case s.live != nil:
		copy(s.live, s.saved)
		return
	case s.state != nil:
		if h.(encoding.BinaryUnmarshaler).UnmarshalBinary(s.state) == nil {
			return
		}
	}
	h.Reset()
	h.Write(s.pad)
}

func (s *snapshot) wipe() {
	clear(s.saved)
	clear(s.state)
	clear(s.pad)
}

// hmacState is HMAC over one key with the keyed inner and outer states
// saved.
type hmacState struct {
	inner, outer   hash.Hash
	innerS, outerS snapshot
	size           int
}

func newHMAC(newHash func() hash.Hash, key []byte) *hmacState {
	m := &hmacState{inner: newHash(), outer: newHash()}
	bs := m.inner.BlockSize()
	m.size = m.inner.Size()
	k := key
	if len(k) > bs {
		m.inner.Write(k)
		k = m.inner.Sum(nil)
		m.inner.Reset()
		defer clear(k)
	}
	ipad, opad := make([]byte, bs), make([]byte, bs)
	defer clear(ipad)
	defer clear(opad)
	copy(ipad, k)
	copy(opad, k)
	for i := range ipad {
		ipad[i] ^= 0x36
		opad[i] ^= 0x5c
	}
	m.inner.Write(ipad)
	m.outer.Write(opad)
	m.innerS, m.outerS = takeSnapshot(m.inner, ipad), takeSnapshot(m.outer, opad)
	return m
}

// sum computes HMAC(key, a || b) into out[:0]; out may be a.
func (m *hmacState) sum(out, a, b []byte) []byte {
	m.innerS.restore(m.inner)
	m.inner.Write(a)
	m.inner.Write(b)
	out = m.inner.Sum(out[:0])
	m.outerS.restore(m.outer)
	m.outer.Write(out)
	return m.outer.Sum(out[:0])
}

func (m *hmacState) wipe() {
	m.inner.Reset()
	m.outer.Reset()
	m.innerS.wipe()
	m.outerS.wipe()
}

// PBKDF2Block is one output block T_i of PBKDF2-HMAC (RFC 8018 section
// 5.2), computed a stretch of iterations at a time.
type PBKDF2Block struct {
	m    *hmacState
	u, t []byte
	done uint32
}

// NewPBKDF2Block starts block index (1-based) of PBKDF2 with HMAC over
// newHash, one iteration done. Wipe it when done with it.
func NewPBKDF2Block(newHash func() hash.Hash, password, salt []byte, index uint32) *PBKDF2Block {
	m := newHMAC(newHash, password)
	b := &PBKDF2Block{m: m, u: make([]byte, 0, m.size), t: make([]byte, m.size)}
	b.start(salt, index)
	return b
}

func (b *PBKDF2Block) start(salt []byte, index uint32) {
	idx := [4]byte{byte(index >> 24), byte(index >> 16), byte(index >> 8), byte(index)}
	b.u = b.m.sum(b.u, salt, idx[:])
	copy(b.t, b.u)
	b.done = 1
}

// Run continues up to n iterations in all, polling stop (nil: never
// stops) every few hundred; it returns false if stop returned true,
// with the block usable for a later Run.
func (b *PBKDF2Block) Run(n uint32, stop func() bool) bool {
	for b.done < n {
		end := n
		if stop != nil {
			end = min(n, b.done+pbkdf2StopEvery)
		}
		m, u, t := b.m, b.u, b.t
		for ; b.done < end; b.done++ {
			u = m.sum(u, u, nil)
			for j := range t {
				t[j] ^= u[j]
			}
		}
		b.u = u
		if stop != nil && stop() {
			return false
		}
	}
	return true
}

// Sum is the block after the iterations so far. It is the block's own
// buffer, updated by Run and cleared by Wipe.
func (b *PBKDF2Block) Sum() []byte { return b.t }

// Iterations is how many iterations the block has had.
func (b *PBKDF2Block) Iterations() uint32 { return b.done }

// Wipe clears the block and its keyed HMAC states.
func (b *PBKDF2Block) Wipe() {
	b.m.wipe()
	clear(b.u[:cap(b.u)])
	clear(b.t)
}

// PBKDF2Key is PBKDF2 (RFC 8018) with HMAC over newHash. Unlike
// crypto/pbkdf2 it takes the password as bytes and wipes its intermediate
// state, and it accepts any iteration count and salt length.
func PBKDF2Key(newHash func() hash.Hash, password, salt []byte, iter, keyLen int) ([]byte, error) {
	return pbkdf2Key(context.Background(), newHash, password, salt, iter, keyLen)
}

// PBKDF2KeyContext is PBKDF2Key that stops with ctx's error when ctx ends.
func PBKDF2KeyContext(ctx context.Context, newHash func() hash.Hash, password, salt []byte, iter, keyLen int) ([]byte, error) {
	return pbkdf2Key(ctx, newHash, password, salt, iter, keyLen)
}

func pbkdf2Key(ctx context.Context, newHash func() hash.Hash, password, salt []byte, iter, keyLen int) ([]byte, error) {
	if iter < 1 || uint64(iter) > math.MaxUint32 || keyLen < 1 {
		return nil, fmt.Errorf("%w: pbkdf2 with %d iterations and key length %d", ErrInvalid, iter, keyLen)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	stop := contextStop(ctx)
	m := newHMAC(newHash, password)
	b := &PBKDF2Block{m: m, u: make([]byte, 0, m.size), t: make([]byte, m.size)}
	defer b.Wipe()
	blocks := (keyLen + m.size - 1) / m.size
	if uint64(blocks) > math.MaxUint32 {
		return nil, fmt.Errorf("%w: pbkdf2 key length %d too long", ErrInvalid, keyLen)
	}
	out := make([]byte, 0, blocks*m.size)
	for i := 1; i <= blocks; i++ {
		b.start(salt, uint32(i))
		if !b.Run(uint32(iter), stop) {
			clear(out[:cap(out)])
			return nil, contextErr(ctx)
		}
		out = append(out, b.t...)
	}
	clear(out[keyLen:cap(out)])
	return out[:keyLen], nil
}
