// Package adiantum implements Adiantum exactly as Linux's crypto/adiantum.c
// does for "adiantum(xchacha12,aes)" and "adiantum(xchacha20,aes)": the
// HBSH construction of the Adiantum paper (https://eprint.iacr.org/2018/720)
// with an XChaCha stream, AES-256 on one 16-byte block, and the NH +
// Poly1305 hash, over messages of 16 bytes or more and a 32-byte tweak.
//
// Encrypting P = P_L ‖ P_R (P_R the last 16 bytes) under tweak T:
//
//	P_M = P_R + H(T, P_L)             (mod 2^128, little-endian)
//	C_M = AES-256(P_M)
//	C_L = P_L ⊕ XChaCha(C_M ‖ 1)
//	C_R = C_M − H(T, C_L)
//
// where H(T, M) = Poly1305_Kt(bitlen(M) ‖ T) + Poly1305_Km(NH(M)), both
// without the final pad, and every subkey comes from the XChaCha keystream
// under the user key with nonce 1.
//
// Implementations (Impls): "generic" is plain Go and the reference the
// others are tested against; on amd64 "avx2" runs XChaCha 8 blocks at a
// time and NH 2 units at a time in ymm registers, "avx512" XChaCha 16
// blocks and NH 4 units at a time in zmm registers (and the last 8 or
// fewer blocks in ymm registers with AVX-512VL's rotates); both use
// Poly1305 in scalar assembly. The kernels are printed by the generator in
// _asm; the purego build tag leaves only "generic".
package adiantum

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"unsafe"

	"github.com/blkcrypt/blkcrypt/internal/aes"
)

// Sizes.
const (
	KeySize   = 32 // the user key, XChaCha's key
	TweakSize = 32 // Linux's Adiantum IV
	MinLen    = 16 // the shortest message: the AES block alone

	derivedSize = 32 + 16 + 16 + nhKeyBytes // AES key, header Poly1305 key, message Poly1305 key, NH key
)

// ErrUnknownImpl means NewImpl was asked for an implementation that does
// not exist or that this CPU cannot run.
var ErrUnknownImpl = errors.New("adiantum: unknown or unsupported implementation")

// implID selects an implementation. The kernels are chosen by a switch
// on it (the architecture file's xorStream, nhChunks and polyBlocks), not
// through function values, so that the stack buffers handed to them do not
// escape to the heap.
type implID int

const (
	implGeneric implID = iota
	implAVX2
	implAVX512
)

var implNames = [...]string{implGeneric: "generic", implAVX2: "avx2", implAVX512: "avx512"}

// impls lists the implementations this CPU runs, fastest first; the
// architecture file prepends its own.
var impls = []implID{implGeneric}

// Impls returns the names of the implementations usable on this CPU,
// fastest first; "generic" is always last.
func Impls() []string {
	var names []string
	for _, im := range impls {
		names = append(names, implNames[im])
	}
	return names
}

// Cipher is an keyed Adiantum instance. It keeps no per-request state and
// is safe for concurrent use.
type Cipher struct {
	im        implID
	rounds    int
	streamKey [8]uint32
	block     *aes.Block
	headerKey polyKey
	msgKey    polyKey
	nhKey     [nhKeyWords]uint32
	nhKeyX    nhKeyX // nhKey in the form the vector NH reads
}

// New returns the fastest implementation for key with XChaCha of rounds
// (12 or 20) rounds and the fastest internal/aes AES-256.
func New(rounds int, key []byte) (*Cipher, error) {
	return NewImpl(implNames[impls[0]], rounds, key, aes.New)
}

// NewImpl is New for the named implementation (one of Impls), with the
// AES-256 that newBlock returns (aes.New, or aes.NewImpl for one
// implementation).
func NewImpl(name string, rounds int, key []byte, newBlock func(key []byte) (*aes.Block, error)) (*Cipher, error) {
	im := implID(-1)
	for _, x := range impls {
		if implNames[x] == name {
			im = x
		}
	}
	if im < 0 {
		return nil, fmt.Errorf("%w: %q", ErrUnknownImpl, name)
	}
	if rounds != 12 && rounds != 20 {
		return nil, fmt.Errorf("adiantum: xchacha%d is not supported", rounds)
	}
	if len(key) != KeySize {
		return nil, fmt.Errorf("adiantum: invalid key size %d", len(key))
	}
	c := &Cipher{im: im, rounds: rounds}
	for i := range c.streamKey {
		c.streamKey[i] = binary.LittleEndian.Uint32(key[4*i:])
	}
	var derived [derivedSize]byte
	defer clear(derived[:])
	nonce := [24]byte{1}
	s := xchachaState(&c.streamKey, &nonce, rounds)
	xorKeyStreamGeneric(&s, derived[:], derived[:], rounds)
	clear(s[:])
	b, err := newBlock(derived[:32])
	if err != nil {
		return nil, fmt.Errorf("adiantum: block cipher: %w", err)
	}
	if b.Rounds() != 14 {
		return nil, errors.New("adiantum: block cipher is not AES-256")
	}
	c.block = b
	c.headerKey = newPolyKey(derived[32:48])
	c.msgKey = newPolyKey(derived[48:64])
	for i := range c.nhKey {
		c.nhKey[i] = binary.LittleEndian.Uint32(derived[64+4*i:])
	}
	c.nhKeyX.expand(&c.nhKey)
	return c, nil
}

// Impl returns the name of c's implementation.
func (c *Cipher) Impl() string { return implNames[c.im] }

// Wipe zeroes c's key material, and the block cipher's if it can. c must
// not be used afterwards.
func (c *Cipher) Wipe() {
	clear(c.streamKey[:])
	clear(c.headerKey[:])
	clear(c.msgKey[:])
	clear(c.nhKey[:])
	c.nhKeyX = nhKeyX{}
	c.block.Wipe()
}

// Encrypt encrypts src (at least MinLen bytes) into dst under tweak (TweakSize
// bytes). dst and src may be the same slice but must not overlap otherwise.
func (c *Cipher) Encrypt(dst, src, tweak []byte) { c.crypt(dst, src, tweak, true) }

// Decrypt is the inverse of Encrypt.
func (c *Cipher) Decrypt(dst, src, tweak []byte) { c.crypt(dst, src, tweak, false) }

func (c *Cipher) crypt(dst, src, tweak []byte, enc bool) {
	if len(src) < MinLen || len(tweak) != TweakSize || len(dst) < len(src) {
		panic("adiantum: invalid buffer or tweak length")
	}
	dst = dst[:len(src)]
	if inexactOverlap(dst, src) {
		panic("adiantum: invalid buffer overlap")
	}
	bulk := len(src) - 16
	tlo, thi := c.headerHash(bulk, tweak)
	mlo, mhi := c.msgHash(src[:bulk])
	hlo, hhi := add128(tlo, thi, mlo, mhi)

	// P_M (or C_M when decrypting): the right part plus the hash.
	var blk [16]byte
	rlo := binary.LittleEndian.Uint64(src[bulk:])
	rhi := binary.LittleEndian.Uint64(src[bulk+8:])
	rlo, rhi = add128(rlo, rhi, hlo, hhi)
	binary.LittleEndian.PutUint64(blk[0:], rlo)
	binary.LittleEndian.PutUint64(blk[8:], rhi)

	// The stream's nonce is C_M ‖ le32(1) ‖ 0.
	var nonce [24]byte
	var out [16]byte
	if enc {
		c.block.Encrypt(out[:], blk[:])
		copy(nonce[:16], out[:])
	} else {
		copy(nonce[:16], blk[:])
		c.block.Decrypt(out[:], blk[:])
	}
	nonce[16] = 1
	s := xchachaState(&c.streamKey, &nonce, c.rounds)
	xorStream(c.im, &s, dst[:bulk], src[:bulk], c.rounds)

	mlo, mhi = c.msgHash(dst[:bulk])
	hlo, hhi = add128(tlo, thi, mlo, mhi)
	olo := binary.LittleEndian.Uint64(out[0:])
	ohi := binary.LittleEndian.Uint64(out[8:])
	olo, ohi = sub128(olo, ohi, hlo, hhi)
	binary.LittleEndian.PutUint64(dst[bulk:], olo)
	binary.LittleEndian.PutUint64(dst[bulk+8:], ohi)
	clear(s[:])
}

// headerHash is Poly1305 under the header key over the bulk length in bits
// (a 16-byte block) and the tweak.
func (c *Cipher) headerHash(bulk int, tweak []byte) (lo, hi uint64) {
	var b [16 + TweakSize]byte
	binary.LittleEndian.PutUint64(b[0:], uint64(bulk)*8)
	copy(b[16:], tweak)
	var h polyState
	polyBlocks(c.im, &h, &c.headerKey, b[:])
	return polyEmit(&h)
}

// msgHash is NHPoly1305: NH over each 1024-byte piece of msg, the last
// piece zero-padded to 16 bytes, and Poly1305 under the message key over
// the 32-byte NH values.
func (c *Cipher) msgHash(msg []byte) (lo, hi uint64) {
	var h polyState
	var nhOut [4 * nhHashSize]byte
	full := len(msg)
	var last []byte
	if len(msg)%nhUnit != 0 {
		// The padded unit belongs to the last NH message: hash that one
		// from a zero-padded copy.
		full = len(msg) / nhMsgBytes * nhMsgBytes
		last = msg[full:]
	}
	for off := 0; off < full; {
		n := min(full-off, 4*nhMsgBytes)
		nhChunks(c, msg[off:off+n], nhOut[:])
		polyBlocks(c.im, &h, &c.msgKey, nhOut[:(n+nhMsgBytes-1)/nhMsgBytes*nhHashSize])
		off += n
	}
	if last != nil {
		var buf [nhMsgBytes]byte
		copy(buf[:], last)
		nhChunks(c, buf[:(len(last)+nhUnit-1)&^(nhUnit-1)], nhOut[:])
		polyBlocks(c.im, &h, &c.msgKey, nhOut[:nhHashSize])
	}
	return polyEmit(&h)
}

// nhChunksGeneric is impl.nh for the generic implementation.
func nhChunksGeneric(c *Cipher, msg []byte, out []byte) {
	for len(msg) > 0 {
		n := min(len(msg), nhMsgBytes)
		nhGeneric(&c.nhKey, msg[:n], (*[nhHashSize]byte)(out))
		msg, out = msg[n:], out[nhHashSize:]
	}
}

func add128(alo, ahi, blo, bhi uint64) (uint64, uint64) {
	lo, c := bits.Add64(alo, blo, 0)
	hi, _ := bits.Add64(ahi, bhi, c)
	return lo, hi
}

func sub128(alo, ahi, blo, bhi uint64) (uint64, uint64) {
	lo, b := bits.Sub64(alo, blo, 0)
	hi, _ := bits.Sub64(ahi, bhi, b)
	return lo, hi
}

// nhKeyX is the NH key rearranged for the vector code: for each 16-byte key
// unit (k0, k1, k2, k3), a = (k0, k0, k1, k1) and b = (k2, k2, k3, k3), the
// lanes VPMULUDQ multiplies after the message words are shuffled alike.
type nhKeyX struct {
	a, b [nhKeyWords / 4][4]uint32
}

func (x *nhKeyX) expand(k *[nhKeyWords]uint32) {
	for j := range x.a {
		x.a[j] = [4]uint32{k[4*j], k[4*j], k[4*j+1], k[4*j+1]}
		x.b[j] = [4]uint32{k[4*j+2], k[4*j+2], k[4*j+3], k[4*j+3]}
	}
}

// inexactOverlap reports whether x and y share memory other than at the
// same start (in place is fine, shifted is not).
func inexactOverlap(x, y []byte) bool {
	if len(x) == 0 || len(y) == 0 || &x[0] == &y[0] {
		return false
	}
	xs, ys := uintptr(unsafe.Pointer(&x[0])), uintptr(unsafe.Pointer(&y[0]))
	return xs < ys+uintptr(len(y)) && ys < xs+uintptr(len(x))
}
