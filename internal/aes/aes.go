// Package aes provides AES block-cipher kernels for the dm-crypt modes used by
// blkcrypt: ECB, CBC (single request, ESSIV-fused and multi-buffer across
// sectors) and XTS (IEEE 1619, with ciphertext stealing).
//
// Several implementations exist; Impls lists those usable on this CPU. On
// amd64 "aesni" uses AES-NI on XMM registers with eight blocks in flight and
// "vaes" uses VAES/VPCLMULQDQ on YMM registers (VEX encoded, no AVX-512
// needed) with sixteen blocks in flight. "generic" is pure Go and always
// present; it is the only one built with the purego tag or on other
// architectures.
//
// All methods accept dst == src (in place) or non-overlapping buffers; a
// partial overlap is a programmer error and panics. Data-path methods never
// allocate.
package aes

import (
	"errors"
	"strconv"
	"unsafe"
)

type implID uint8

const (
	implGeneric implID = iota
	implAESNI
	implVAES
)

var implNames = [...]string{implGeneric: "generic", implAESNI: "aesni", implVAES: "vaes"}

const (
	xkDecOff = 16 * (maxRounds + 1) // offset of the decryption schedule in Block.xk
	ykDecOff = 32 * (maxRounds + 1) // offset of the decryption schedule in Block.yk
)

// Block is an expanded AES key. It satisfies crypto/cipher.Block.
type Block struct {
	// 128-bit round keys as bytes (encryption then decryption schedule),
	// for AES-NI.
	xk [2 * xkDecOff]byte
	// Every round key duplicated into 256 bits, for VAES on YMM registers.
	yk [2 * ykDecOff]byte
	// Round keys as big-endian words, for the generic implementation.
	enc    [4 * (maxRounds + 1)]uint32
	dec    [4 * (maxRounds + 1)]uint32
	rounds int
	impl   implID
}

// Impls lists the implementation names usable on this CPU, best first.
// "generic" is always present and last.
func Impls() []string {
	ids := archImpls()
	out := make([]string, 0, len(ids)+1)
	for _, id := range ids {
		out = append(out, implNames[id])
	}
	return append(out, implNames[implGeneric])
}

// New expands key (16, 24 or 32 bytes) for the best implementation.
func New(key []byte) (*Block, error) {
	impl := implGeneric
	if ids := archImpls(); len(ids) > 0 {
		impl = ids[0]
	}
	return newBlock(impl, key)
}

// NewImpl expands key for the named implementation. It fails if the name is
// unknown or the implementation cannot run on this CPU.
func NewImpl(impl string, key []byte) (*Block, error) {
	if impl == implNames[implGeneric] {
		return newBlock(implGeneric, key)
	}
	for _, id := range archImpls() {
		if implNames[id] == impl {
			return newBlock(id, key)
		}
	}
	for _, n := range implNames {
		if n == impl {
			return nil, errors.New("aes: implementation " + strconv.Quote(impl) + " is not supported on this CPU")
		}
	}
	return nil, errors.New("aes: unknown implementation " + strconv.Quote(impl))
}

func newBlock(impl implID, key []byte) (*Block, error) {
	switch len(key) {
	case 16, 24, 32:
	default:
		return nil, errors.New("aes: invalid key size " + strconv.Itoa(len(key)))
	}
	b := &Block{impl: impl}
	b.expandKey(key)
	return b, nil
}

// Impl returns the name of the implementation used by b.
func (b *Block) Impl() string { return implNames[b.impl] }

// BlockSize returns the AES block size, 16.
func (b *Block) BlockSize() int { return 16 }

// Rounds returns the number of AES rounds (10, 12 or 14).
func (b *Block) Rounds() int { return b.rounds }

// Wipe zeroes all round keys. b must not be used afterwards.
func (b *Block) Wipe() {
	clear(b.xk[:])
	clear(b.yk[:])
	clear(b.enc[:])
	clear(b.dec[:])
}

// overlap reports whether x and y share memory without starting at the same
// address (exact aliasing is allowed).
func inexactOverlap(x, y []byte) bool {
	if len(x) == 0 || len(y) == 0 {
		return false
	}
	xp := uintptr(unsafe.Pointer(unsafe.SliceData(x)))
	yp := uintptr(unsafe.Pointer(unsafe.SliceData(y)))
	if xp == yp {
		return false
	}
	return xp < yp+uintptr(len(y)) && yp < xp+uintptr(len(x))
}

// checkBuffers validates a bulk operation and returns dst cut to len(src).
func checkBuffers(op string, dst, src []byte) []byte {
	if len(src)%16 != 0 {
		panic("aes: " + op + ": input length " + strconv.Itoa(len(src)) + " is not a multiple of the block size")
	}
	if len(dst) < len(src) {
		panic("aes: " + op + ": output smaller than input")
	}
	dst = dst[:len(src)]
	if inexactOverlap(dst, src) {
		panic("aes: " + op + ": invalid buffer overlap")
	}
	return dst
}

// Encrypt encrypts the first block of src into dst.
func (b *Block) Encrypt(dst, src []byte) {
	if len(src) < 16 {
		panic("aes: Encrypt: input not full block")
	}
	if len(dst) < 16 {
		panic("aes: Encrypt: output not full block")
	}
	if inexactOverlap(dst[:16], src[:16]) {
		panic("aes: Encrypt: invalid buffer overlap")
	}
	b.encBlock(dst, src)
}

// Decrypt decrypts the first block of src into dst.
func (b *Block) Decrypt(dst, src []byte) {
	if len(src) < 16 {
		panic("aes: Decrypt: input not full block")
	}
	if len(dst) < 16 {
		panic("aes: Decrypt: output not full block")
	}
	if inexactOverlap(dst[:16], src[:16]) {
		panic("aes: Decrypt: invalid buffer overlap")
	}
	b.decBlock(dst, src)
}

func (b *Block) encBlock(dst, src []byte) {
	if b.impl == implGeneric {
		genEncBlock(b, dst, src)
		return
	}
	archBlock(b, true, dst, src)
}

func (b *Block) decBlock(dst, src []byte) {
	if b.impl == implGeneric {
		genDecBlock(b, dst, src)
		return
	}
	archBlock(b, false, dst, src)
}

// EncryptECB encrypts every 16-byte block of src independently.
func (b *Block) EncryptECB(dst, src []byte) {
	dst = checkBuffers("EncryptECB", dst, src)
	b.ecb(true, dst, src)
}

// DecryptECB decrypts every 16-byte block of src independently.
func (b *Block) DecryptECB(dst, src []byte) {
	dst = checkBuffers("DecryptECB", dst, src)
	b.ecb(false, dst, src)
}

func (b *Block) ecb(enc bool, dst, src []byte) {
	if len(src) == 0 {
		return
	}
	if b.impl == implGeneric {
		genECB(b, enc, dst, src)
		return
	}
	archECB(b, enc, dst, src)
}

// EncryptCBC encrypts src in CBC mode. On return iv holds the last
// ciphertext block (the chaining value for a following call).
func (b *Block) EncryptCBC(dst, src []byte, iv *[16]byte) {
	dst = checkBuffers("EncryptCBC", dst, src)
	if len(src) == 0 {
		return
	}
	if b.impl == implGeneric {
		genEncCBC(b, dst, src, iv)
		return
	}
	archEncCBC(b, dst, src, iv)
}

// DecryptCBC decrypts src in CBC mode. On return iv holds the last
// ciphertext block of src.
func (b *Block) DecryptCBC(dst, src []byte, iv *[16]byte) {
	dst = checkBuffers("DecryptCBC", dst, src)
	if len(src) == 0 {
		return
	}
	if b.impl == implGeneric {
		genDecCBC(b, dst, src, iv)
		return
	}
	archDecCBC(b, dst, src, iv)
}

// EncryptESSIVCBC encrypts one request with ESSIV: the CBC IV is
// ivKey.Encrypt(iv). iv is not modified.
func (b *Block) EncryptESSIVCBC(ivKey *Block, dst, src []byte, iv *[16]byte) {
	dst = checkBuffers("EncryptESSIVCBC", dst, src)
	if len(src) == 0 {
		return
	}
	if b.impl != implGeneric && ivKey.impl != implGeneric {
		archEncESSIVCBC(b, ivKey, dst, src, iv)
		return
	}
	var civ [16]byte
	ivKey.encBlock(civ[:], iv[:])
	b.EncryptCBC(dst, src, &civ)
}

// DecryptESSIVCBC decrypts one request with ESSIV: the CBC IV is
// ivKey.Encrypt(iv). iv is not modified.
func (b *Block) DecryptESSIVCBC(ivKey *Block, dst, src []byte, iv *[16]byte) {
	dst = checkBuffers("DecryptESSIVCBC", dst, src)
	if len(src) == 0 {
		return
	}
	if b.impl != implGeneric && ivKey.impl != implGeneric {
		archDecESSIVCBC(b, ivKey, dst, src, iv)
		return
	}
	var civ [16]byte
	ivKey.encBlock(civ[:], iv[:])
	b.DecryptCBC(dst, src, &civ)
}

// checkSectors validates a multi-sector call and returns dst cut to
// len(src) and the number of sectors.
func checkSectors(op string, dst, src []byte, sectorSize int, ivs []byte) ([]byte, int) {
	if sectorSize <= 0 || sectorSize%16 != 0 {
		panic("aes: " + op + ": sector size " + strconv.Itoa(sectorSize) + " is not a positive multiple of 16")
	}
	if len(src)%sectorSize != 0 {
		panic("aes: " + op + ": input length " + strconv.Itoa(len(src)) + " is not a multiple of the sector size")
	}
	n := len(src) / sectorSize
	if len(ivs) < 16*n {
		panic("aes: " + op + ": need " + strconv.Itoa(16*n) + " bytes of IVs, have " + strconv.Itoa(len(ivs)))
	}
	if len(dst) < len(src) {
		panic("aes: " + op + ": output smaller than input")
	}
	dst = dst[:len(src)]
	if inexactOverlap(dst, src) {
		panic("aes: " + op + ": invalid buffer overlap")
	}
	return dst, n
}

// EncryptCBCSectors CBC-encrypts n = len(src)/sectorSize independent sectors,
// sector i with the IV ivs[16*i:16*i+16]. Several sectors are encrypted in
// parallel (multi-buffer). ivs is not modified.
func (b *Block) EncryptCBCSectors(dst, src []byte, sectorSize int, ivs []byte) {
	dst, n := checkSectors("EncryptCBCSectors", dst, src, sectorSize, ivs)
	if n == 0 {
		return
	}
	if b.impl == implGeneric {
		var iv [16]byte
		for i := 0; i < n; i++ {
			copy(iv[:], ivs[16*i:])
			o := i * sectorSize
			genEncCBC(b, dst[o:o+sectorSize], src[o:o+sectorSize], &iv)
		}
		return
	}
	archEncCBCSectors(b, dst, src, sectorSize, ivs[:16*n])
}

// DecryptCBCSectors CBC-decrypts n = len(src)/sectorSize independent
// sectors, sector i with the IV ivs[16*i:16*i+16]. ivs is not modified.
func (b *Block) DecryptCBCSectors(dst, src []byte, sectorSize int, ivs []byte) {
	dst, n := checkSectors("DecryptCBCSectors", dst, src, sectorSize, ivs)
	var iv [16]byte
	for i := 0; i < n; i++ {
		copy(iv[:], ivs[16*i:])
		o := i * sectorSize
		if b.impl == implGeneric {
			genDecCBC(b, dst[o:o+sectorSize], src[o:o+sectorSize], &iv)
		} else {
			archDecCBC(b, dst[o:o+sectorSize], src[o:o+sectorSize], &iv)
		}
	}
}

// XTS is AES-XTS (IEEE 1619) with a data key and a tweak key.
type XTS struct {
	data, tweak *Block
}

// NewXTS combines a data key and a tweak key; both must use the same
// implementation.
func NewXTS(data, tweak *Block) (*XTS, error) {
	if data == nil || tweak == nil {
		return nil, errors.New("aes: NewXTS: nil key")
	}
	if data.impl != tweak.impl {
		return nil, errors.New("aes: NewXTS: data key uses " + data.Impl() + " but tweak key uses " + tweak.Impl())
	}
	return &XTS{data: data, tweak: tweak}, nil
}

// Encrypt encrypts one data unit (len(src) >= 16) with tweak
// T = tweakKey.Encrypt(iv). A length that is not a multiple of 16 uses
// ciphertext stealing. iv is not modified.
func (x *XTS) Encrypt(dst, src []byte, iv *[16]byte) {
	dst = checkXTS("Encrypt", dst, src)
	var t [16]byte
	x.tweak.encBlock(t[:], iv[:])
	x.data.xtsUnit(true, dst, src, &t)
}

// Decrypt decrypts one data unit; see Encrypt.
func (x *XTS) Decrypt(dst, src []byte, iv *[16]byte) {
	dst = checkXTS("Decrypt", dst, src)
	var t [16]byte
	x.tweak.encBlock(t[:], iv[:])
	x.data.xtsUnit(false, dst, src, &t)
}

func checkXTS(op string, dst, src []byte) []byte {
	if len(src) < 16 {
		panic("aes: XTS." + op + ": input shorter than one block")
	}
	if len(dst) < len(src) {
		panic("aes: XTS." + op + ": output smaller than input")
	}
	dst = dst[:len(src)]
	if inexactOverlap(dst, src) {
		panic("aes: XTS." + op + ": invalid buffer overlap")
	}
	return dst
}

// xtsBlocks processes whole blocks, advancing the tweak t by x per block.
func (b *Block) xtsBlocks(enc bool, dst, src []byte, t *[16]byte) {
	if b.impl == implGeneric {
		genXTS(b, enc, dst, src, t)
		return
	}
	archXTS(b, enc, dst, src, t)
}

// xtsUnit processes one data unit of len(src) >= 16 bytes with the
// encrypted tweak t (clobbered), stealing ciphertext for a partial last
// block as IEEE 1619 section 5.3 describes.
func (b *Block) xtsUnit(enc bool, dst, src []byte, t *[16]byte) {
	n := len(src)
	rem := n % 16
	full := n - rem
	if rem != 0 {
		full -= 16 // the last whole block takes part in the stealing
	}
	if full > 0 {
		b.xtsBlocks(enc, dst[:full], src[:full], t)
	}
	if rem == 0 {
		return
	}
	var cc, pp [16]byte
	if enc {
		copy(cc[:], src[full:full+16])
		b.xtsBlocks(true, cc[:], cc[:], t) // t advances to the last tweak
		copy(pp[:], src[full+16:n])
		copy(pp[rem:], cc[rem:])
		copy(dst[full+16:n], cc[:rem])
		b.xtsBlocks(true, pp[:], pp[:], t)
		copy(dst[full:full+16], pp[:])
		return
	}
	t2 := *t
	mulx(&t2)
	copy(pp[:], src[full:full+16])
	b.xtsBlocks(false, pp[:], pp[:], &t2)
	copy(cc[:], src[full+16:n])
	copy(cc[rem:], pp[rem:])
	copy(dst[full+16:n], pp[:rem])
	b.xtsBlocks(false, cc[:], cc[:], t)
	copy(dst[full:full+16], cc[:])
}

// sectorChunk is how many tweaks are encrypted in one ECB pass by the
// sector functions (bounded so the scratch buffer stays on the stack).
const sectorChunk = 64

// EncryptSectors encrypts n = len(src)/sectorSize sectors; sector i uses
// the raw IV ivs[16*i:16*i+16]. sectorSize must be a positive multiple of 16.
func (x *XTS) EncryptSectors(dst, src []byte, sectorSize int, ivs []byte) {
	dst, n := checkSectors("XTS.EncryptSectors", dst, src, sectorSize, ivs)
	x.sectors(true, dst, src, sectorSize, ivs, n)
}

// DecryptSectors decrypts n = len(src)/sectorSize sectors; see
// EncryptSectors.
func (x *XTS) DecryptSectors(dst, src []byte, sectorSize int, ivs []byte) {
	dst, n := checkSectors("XTS.DecryptSectors", dst, src, sectorSize, ivs)
	x.sectors(false, dst, src, sectorSize, ivs, n)
}

func (x *XTS) sectors(enc bool, dst, src []byte, ss int, ivs []byte, n int) {
	var tw [(sectorChunk + 1) * 16]byte // one spare entry for archXTSSectors
	for s := 0; s < n; s += sectorChunk {
		k := min(sectorChunk, n-s)
		x.tweak.ecb(true, tw[:16*k], ivs[16*s:16*(s+k)])
		o := s * ss
		if x.data.impl != implGeneric && archXTSSectors(x.data, enc, dst[o:o+k*ss], src[o:o+k*ss], ss, tw[:]) {
			continue
		}
		for j := 0; j < k; j++ {
			o := (s + j) * ss
			x.data.xtsBlocks(enc, dst[o:o+ss], src[o:o+ss], (*[16]byte)(tw[16*j:]))
		}
	}
}
