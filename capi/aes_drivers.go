package capi

import (
	"crypto/cipher"
	"crypto/sha256"
	"encoding/binary"
	"slices"

	"github.com/blkcrypt/blkcrypt/internal/aes"
)

// The internal/aes kernels, registered as drivers per implementation, the
// way the kernel registers aes-generic, aes-aesni and cbc-aes-aesni. Which
// implementations exist depends on the CPU (and the purego build tag).

var implPriority = map[string]struct{ cipher, mode, fused int }{
	"generic": {PriorityGeneric, PriorityGeneric + 10, PriorityGeneric + 20},
	"aesni":   {PriorityAESNI, PriorityModeNI, PriorityFused},
	"vaes":    {PriorityAESNI + 10, PriorityVAES, PriorityFused + 100},
	"ce":      {PriorityCE, PriorityModeCE, PriorityFusedCE}, // arm64: aes_ce_drivers.go
	// Only its XTS differs from vaes (ZMM kernels), so only xts(aes) is
	// registered for it, above xts-aes-vaes, as the kernel prefers
	// xts-aes-vaes-avx10_512 where it has AVX-512.
	"vaes-avx512": {mode: PriorityVAES + 10},
}

// xtsOnly lists the implementations registered only for xts(aes).
var xtsOnly = map[string]bool{"vaes-avx512": true}

func init() {
	if impls := aes.Impls(); slices.Index(impls, "vaes-avx512") > slices.Index(impls, "vaes") && slices.Contains(impls, "vaes") {
		// A CPU that lowers its clock under zmm code (aes orders vaes
		// first there): the kernel's exclusion list ranks avx10_512 low too.
		p := implPriority["vaes-avx512"]
		p.mode = PriorityVAES - 10
		implPriority["vaes-avx512"] = p
	}
	base := map[string]*Alg{}
	for _, impl := range aes.Impls() {
		if impl == "vaes" || xtsOnly[impl] { // single blocks gain nothing from wide registers
			continue
		}
		impl := impl
		base[impl] = &Alg{Name: "aes", Driver: "aes-" + impl, Priority: implPriority[impl].cipher, Type: TypeCipher,
			BlockSize: 16, KeySizes: aesKeySizes,
			NewCipher: func(k []byte) (cipher.Block, error) { return aes.NewImpl(impl, k) }}
		mustRegister(base[impl])
	}
	base["vaes"] = base["aesni"]
	base["vaes-avx512"] = base["aesni"]
	for _, impl := range aes.Impls() {
		impl := impl
		pr := implPriority[impl]
		newBlock := func(k []byte) (*aes.Block, error) { return aes.NewImpl(impl, k) }
		if xtsOnly[impl] {
			mustRegister(xtsAlg(impl, base[impl], pr.mode, newBlock))
			registerZMMCBC(impl, base[impl], newBlock)
			continue
		}
		mustRegister(&Alg{Name: "ecb(aes)", Driver: "ecb-aes-" + impl, Base: base[impl], Priority: pr.mode, Type: TypeSkcipher,
			BlockSize: 16, KeySizes: aesKeySizes,
			NewSkcipher: func(k []byte) (Skcipher, error) {
				b, err := newBlock(k)
				return aesECB{b}, err
			}})
		mustRegister(&Alg{Name: "cbc(aes)", Driver: "cbc-aes-" + impl, Base: base[impl], Priority: pr.mode, Type: TypeSkcipher,
			BlockSize: 16, IVSize: 16, KeySizes: aesKeySizes,
			NewSkcipher: func(k []byte) (Skcipher, error) {
				b, err := newBlock(k)
				return aesCBC{b}, err
			}})
		mustRegister(xtsAlg(impl, base[impl], pr.mode, newBlock))
		mustRegister(&Alg{Name: "essiv(cbc(aes),sha256)", Driver: "essiv-cbc-aes-sha256-" + impl, Base: base[impl], Priority: pr.fused,
			Type: TypeSkcipher, Fused: true, BlockSize: 16, IVSize: 16, KeySizes: aesKeySizes,
			NewSkcipher: func(k []byte) (Skcipher, error) { return newAESESSIV(newBlock, k) }})
	}
}

// newAESESSIV keys the fused ESSIV driver: the data key, and the IV key
// SHA-256(key).
func newAESESSIV(newBlock func([]byte) (*aes.Block, error), k []byte) (Skcipher, error) {
	b, err := newBlock(k)
	if err != nil {
		return nil, err
	}
	salt := sha256.Sum256(k)
	iv, err := newBlock(salt[:])
	clear(salt[:])
	return &aesESSIV{b, iv}, err
}

// xtsAlg is the xts(aes) driver of one implementation: the key's halves
// are the data and the tweak key.
func xtsAlg(impl string, base *Alg, priority int, newBlock func([]byte) (*aes.Block, error)) *Alg {
	return &Alg{Name: "xts(aes)", Driver: "xts-aes-" + impl, Base: base, Priority: priority, Type: TypeSkcipher,
		BlockSize: 16, MinLen: 16, IVSize: 16, KeySizes: []int{32, 48, 64},
		NewSkcipher: func(k []byte) (Skcipher, error) {
			h := len(k) / 2
			d, err := newBlock(k[:h])
			if err != nil {
				return nil, err
			}
			t, err := newBlock(k[h:])
			if err != nil {
				return nil, err
			}
			x, err := aes.NewXTS(d, t)
			return aesXTS{x, d, t}, err
		}}
}

// plain64IV is the IV the Plain64Skcipher methods stand for.
func plain64IV(n uint64) (v [16]byte) {
	binary.LittleEndian.PutUint64(v[:], n)
	return v
}

type aesECB struct{ b *aes.Block }

func (m aesECB) Encrypt(dst, src, _ []byte) { m.b.EncryptECB(dst, src) }
func (m aesECB) Decrypt(dst, src, _ []byte) { m.b.DecryptECB(dst, src) }
func (m aesECB) Wipe()                      { m.b.Wipe() }

type aesCBC struct{ b *aes.Block }

func (m aesCBC) Encrypt(dst, src, iv []byte) {
	v := [16]byte(iv)
	m.b.EncryptCBC(dst, src, &v)
}

func (m aesCBC) Decrypt(dst, src, iv []byte) {
	v := [16]byte(iv)
	m.b.DecryptCBC(dst, src, &v)
}

// EncryptSectors is the multi-buffer path: independent sectors advance
// through the AES rounds side by side.
func (m aesCBC) EncryptPlain64(dst, src []byte, n uint64) {
	v := plain64IV(n)
	m.b.EncryptCBC(dst, src, &v)
}

func (m aesCBC) DecryptPlain64(dst, src []byte, n uint64) {
	v := plain64IV(n)
	m.b.DecryptCBC(dst, src, &v)
}

func (m aesCBC) EncryptSectors(dst, src []byte, ss int, ivs []byte) {
	m.b.EncryptCBCSectors(dst, src, ss, ivs)
}

func (m aesCBC) DecryptSectors(dst, src []byte, ss int, ivs []byte) {
	m.b.DecryptCBCSectors(dst, src, ss, ivs)
}

func (m aesCBC) Wipe() { m.b.Wipe() }

type aesXTS struct {
	x    *aes.XTS
	d, t *aes.Block
}

func (m aesXTS) Encrypt(dst, src, iv []byte) {
	v := [16]byte(iv)
	m.x.Encrypt(dst, src, &v)
}

func (m aesXTS) Decrypt(dst, src, iv []byte) {
	v := [16]byte(iv)
	m.x.Decrypt(dst, src, &v)
}

func (m aesXTS) EncryptPlain64(dst, src []byte, n uint64) { m.x.EncryptPlain64(dst, src, n) }
func (m aesXTS) DecryptPlain64(dst, src []byte, n uint64) { m.x.DecryptPlain64(dst, src, n) }

// A batch of one sector takes the single-request kernel, which encrypts
// the tweak in the same pass instead of a separate ECB call.
func (m aesXTS) EncryptSectors(dst, src []byte, ss int, ivs []byte) {
	if len(src) == ss {
		m.x.Encrypt(dst, src, (*[16]byte)(ivs))
		return
	}
	m.x.EncryptSectors(dst, src, ss, ivs)
}

func (m aesXTS) DecryptSectors(dst, src []byte, ss int, ivs []byte) {
	if len(src) == ss {
		m.x.Decrypt(dst, src, (*[16]byte)(ivs))
		return
	}
	m.x.DecryptSectors(dst, src, ss, ivs)
}
func (m aesXTS) Wipe() { m.d.Wipe(); m.t.Wipe() }

// aesESSIV is the fused essiv(cbc(aes),sha256) driver: the IV encryption
// and the CBC chain run in one routine, and a batch of sectors gets all its
// IVs in one ECB pass and then multi-buffer CBC.
type aesESSIV struct{ b, iv *aes.Block }

func (m *aesESSIV) Encrypt(dst, src, iv []byte) {
	v := [16]byte(iv)
	m.b.EncryptESSIVCBC(m.iv, dst, src, &v)
}

func (m *aesESSIV) Decrypt(dst, src, iv []byte) {
	v := [16]byte(iv)
	m.b.DecryptESSIVCBC(m.iv, dst, src, &v)
}

func (m *aesESSIV) EncryptPlain64(dst, src []byte, n uint64) {
	v := plain64IV(n)
	m.b.EncryptESSIVCBC(m.iv, dst, src, &v)
}

func (m *aesESSIV) DecryptPlain64(dst, src []byte, n uint64) {
	v := plain64IV(n)
	m.b.DecryptESSIVCBC(m.iv, dst, src, &v)
}

func (m *aesESSIV) EncryptSectors(dst, src []byte, ss int, ivs []byte) {
	m.b.EncryptESSIVCBCSectors(m.iv, dst, src, ss, ivs)
}

func (m *aesESSIV) DecryptSectors(dst, src []byte, ss int, ivs []byte) {
	m.iv.EncryptECB(ivs, ivs)
	m.b.DecryptCBCSectors(dst, src, ss, ivs)
}

func (m *aesESSIV) Wipe() { m.b.Wipe(); m.iv.Wipe() }
