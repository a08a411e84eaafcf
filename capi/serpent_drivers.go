package capi

import (
	"slices"

	"github.com/blkcrypt/blkcrypt/internal/serpent"
)

// prioritySerpentAVX2 is the kernel's for its serpent-avx2 drivers: far
// above the template instances over serpent-generic (100), which run one
// block at a time.
const prioritySerpentAVX2 = 600

// The internal/serpent AVX2 kernels, registered only where the CPU and the
// build have them, under the kernel's driver names. There is no
// single-block "serpent-avx2": one block gains nothing from wide registers,
// so serpent-generic stays the cipher (and the base essiv encrypts IVs with).
func init() {
	if !slices.Contains(serpent.Impls(), "avx2") {
		return
	}
	base := registry.byDriver["serpent-generic"]
	newCipher := func(k []byte) (*serpent.Cipher, error) { return serpent.NewImpl("avx2", k) }
	mustRegister(&Alg{Name: "ecb(serpent)", Driver: "ecb-serpent-avx2", Base: base, Priority: prioritySerpentAVX2,
		Type: TypeSkcipher, BlockSize: 16, KeySizes: aesKeySizes,
		NewSkcipher: func(k []byte) (Skcipher, error) {
			c, err := newCipher(k)
			return serpentECB{c}, err
		}})
	mustRegister(&Alg{Name: "cbc(serpent)", Driver: "cbc-serpent-avx2", Base: base, Priority: prioritySerpentAVX2,
		Type: TypeSkcipher, BlockSize: 16, IVSize: 16, KeySizes: aesKeySizes,
		NewSkcipher: func(k []byte) (Skcipher, error) {
			c, err := newCipher(k)
			return serpentCBC{c}, err
		}})
	mustRegister(&Alg{Name: "xts(serpent)", Driver: "xts-serpent-avx2", Base: base, Priority: prioritySerpentAVX2,
		Type: TypeSkcipher, BlockSize: 16, MinLen: 16, IVSize: 16, KeySizes: []int{32, 48, 64},
		NewSkcipher: func(k []byte) (Skcipher, error) {
			h := len(k) / 2
			d, err := newCipher(k[:h])
			if err != nil {
				return nil, err
			}
			t, err := newCipher(k[h:])
			if err != nil {
				return nil, err
			}
			return serpentXTS{serpent.NewXTS(d, t), d, t}, nil
		}})
}

type serpentECB struct{ c *serpent.Cipher }

func (m serpentECB) Encrypt(dst, src, _ []byte) { m.c.EncryptBlocks(dst, src) }
func (m serpentECB) Decrypt(dst, src, _ []byte) { m.c.DecryptBlocks(dst, src) }
func (m serpentECB) Wipe()                      { m.c.Wipe() }

// serpentCBC encrypts one request a block at a time (the chain is serial);
// a batch of sectors runs up to 16 chains side by side.
type serpentCBC struct{ c *serpent.Cipher }

func (m serpentCBC) Encrypt(dst, src, iv []byte) { m.c.EncryptCBC(dst, src, (*[16]byte)(iv)) }
func (m serpentCBC) Decrypt(dst, src, iv []byte) { m.c.DecryptCBC(dst, src, (*[16]byte)(iv)) }

func (m serpentCBC) EncryptPlain64(dst, src []byte, n uint64) {
	v := plain64IV(n)
	m.c.EncryptCBC(dst, src, &v)
}

func (m serpentCBC) DecryptPlain64(dst, src []byte, n uint64) {
	v := plain64IV(n)
	m.c.DecryptCBC(dst, src, &v)
}

func (m serpentCBC) EncryptSectors(dst, src []byte, ss int, ivs []byte) {
	m.c.EncryptCBCSectors(dst, src, ss, ivs)
}

func (m serpentCBC) DecryptSectors(dst, src []byte, ss int, ivs []byte) {
	m.c.DecryptCBCSectors(dst, src, ss, ivs)
}

func (m serpentCBC) Wipe() { m.c.Wipe() }

type serpentXTS struct {
	x    *serpent.XTS
	d, t *serpent.Cipher
}

func (m serpentXTS) Encrypt(dst, src, iv []byte) { m.x.Encrypt(dst, src, (*[16]byte)(iv)) }
func (m serpentXTS) Decrypt(dst, src, iv []byte) { m.x.Decrypt(dst, src, (*[16]byte)(iv)) }

func (m serpentXTS) EncryptPlain64(dst, src []byte, n uint64) {
	v := plain64IV(n)
	m.x.Encrypt(dst, src, &v)
}

func (m serpentXTS) DecryptPlain64(dst, src []byte, n uint64) {
	v := plain64IV(n)
	m.x.Decrypt(dst, src, &v)
}

// The tweaks of a batch are encrypted in one ECB pass into ivs, which the
// interface lets drivers overwrite.
func (m serpentXTS) EncryptSectors(dst, src []byte, ss int, ivs []byte) {
	m.x.EncryptSectors(dst, src, ss, ivs)
}

func (m serpentXTS) DecryptSectors(dst, src []byte, ss int, ivs []byte) {
	m.x.DecryptSectors(dst, src, ss, ivs)
}

func (m serpentXTS) Wipe() { m.d.Wipe(); m.t.Wipe() }
