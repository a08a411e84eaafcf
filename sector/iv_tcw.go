package sector

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/blkcrypt/blkcrypt/capi"
)

// tcw is the CBC mode of TrueCrypt before 4.1, as dm-crypt's crypt_iv_tcw_*
// implements it.
//
// The key ends with an IV seed (the cipher's IV size) and 16 whitening bytes
// (crypt_ctr_ivmode: key_extra_size = iv_size + TCW_WHITENING_SIZE); the
// subkeys come before them. For IV sector n (64-bit little-endian):
//
//	IV        = seed XOR n, and seed[8:] XOR n again when the IV is longer
//	whitening = w[0:8] XOR n || w[8:16] XOR n; each 32-bit quarter replaced
//	            by the kernel "crc32" of it (crc32_le seeded with 0, no
//	            final inversion, stored little-endian); then quarter 0 ^=
//	            quarter 3 and quarter 1 ^= quarter 2
//
// and the first 8 whitening bytes are XORed into every 8 bytes of the sector
// after CBC encryption, and removed before CBC decryption.

const tcwWhiteningSize = 16 // TCW_WHITENING_SIZE

func init() {
	dataModes["tcw"] = newTCW
}

type tcwMode struct {
	ivSize    int
	seed      [16]byte
	whitening [tcwWhiteningSize]byte
}

func newTCW(c *Cipher, alg *capi.Alg, key []byte) (dataMode, error) {
	s := c.spec
	if c.opts.SectorSize != 512 {
		return nil, fmt.Errorf("%w: %s: tcw works on 512-byte sectors only, not %d", ErrInvalidOptions, s, c.opts.SectorSize)
	}
	if c.ivSize < 8 || c.ivSize > 16 {
		return nil, fmt.Errorf("%w: %s: tcw needs an IV of 8 to 16 bytes, %s has %d", ErrInvalidSpec, s, s.CAPI, c.ivSize)
	}
	extra := c.ivSize + tcwWhiteningSize
	if len(key) <= extra {
		return nil, fmt.Errorf("%w: %s: tcw needs a key longer than its %d-byte IV seed and whitening", ErrInvalidKey, s, extra)
	}
	m := &tcwMode{ivSize: c.ivSize}
	off := len(key) - extra
	copy(m.seed[:m.ivSize], key[off:])
	copy(m.whitening[:], key[off+m.ivSize:])
	return m, nil
}

func (m *tcwMode) extraKeySize(*Spec, int) int { return m.ivSize + tcwWhiteningSize }

// crc32LE is the kernel's "crc32" shash: crc32_le with seed 0 and no final
// inversion (crypto/crc32_generic.c), i.e. the IEEE CRC without its pre- and
// post-conditioning.
func crc32LE(p []byte) uint32 {
	crc := uint32(0)
	for _, b := range p {
		crc = crc32.IEEETable[byte(crc)^b] ^ crc>>8
	}
	return crc
}

// whiten XORs the sector's whitening value into the 512-byte sector data.
func (m *tcwMode) whiten(data []byte, sector uint64) {
	var buf [tcwWhiteningSize]byte
	binary.LittleEndian.PutUint64(buf[0:], binary.LittleEndian.Uint64(m.whitening[0:])^sector)
	binary.LittleEndian.PutUint64(buf[8:], binary.LittleEndian.Uint64(m.whitening[8:])^sector)
	var q [4]uint32
	for i := range q {
		q[i] = crc32LE(buf[4*i : 4*i+4])
	}
	w := uint64(q[0]^q[3]) | uint64(q[1]^q[2])<<32
	clear(buf[:])
	for i := 0; i+8 <= len(data); i += 8 {
		binary.LittleEndian.PutUint64(data[i:], binary.LittleEndian.Uint64(data[i:])^w)
	}
}

func (m *tcwMode) iv(iv *[16]byte, sector uint64) {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], sector)
	for i := 0; i < m.ivSize; i++ {
		iv[i] = m.seed[i] ^ n[i&7]
	}
}

func (m *tcwMode) encrypt(c *Cipher, tfm *capi.Tfm, dst, src []byte, ivSector uint64) error {
	s := getDataScratch()
	defer putDataScratch(s)
	iv := (*[16]byte)(s.iv[:16])
	m.iv(iv, ivSector)
	if err := tfm.Encrypt(dst, src, iv[:m.ivSize]); err != nil {
		return err
	}
	m.whiten(dst, ivSector)
	return nil
}

func (m *tcwMode) decrypt(c *Cipher, tfm *capi.Tfm, dst, src []byte, ivSector uint64) error {
	// dm-crypt removes the whitening from the read buffer in place; src
	// must not change here, so the work is done in dst.
	copy(dst, src)
	m.whiten(dst, ivSector)
	s := getDataScratch()
	defer putDataScratch(s)
	iv := (*[16]byte)(s.iv[:16])
	m.iv(iv, ivSector)
	return tfm.Decrypt(dst, dst, iv[:m.ivSize])
}

func (m *tcwMode) wipe() {
	clear(m.seed[:])
	clear(m.whitening[:])
}
