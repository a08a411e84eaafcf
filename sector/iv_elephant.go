package sector

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync"

	"github.com/blkcrypt/blkcrypt/capi"
)

// elephant is BitLocker's AES-CBC with the Elephant diffuser, as dm-crypt's
// crypt_iv_elephant_* implements it ("aes-cbc-elephant").
//
// The key is split in halves (crypt_ctr_ivmode: key_parts = 2,
// key_extra_size = key_size / 2, at most 32 bytes): the first half keys the
// data cipher, the second half keys an AES-ECB transform (always "ecb(aes)")
// that makes a 32-byte sector key from the byte offset o = n * sector size:
//
//	Ks(n) = AES(o as 16 bytes, little-endian) || AES(same with byte 15 = 0x80)
//
// Writing, the plaintext is XORed with Ks repeated over the sector, then
// Diffuser A and Diffuser B run over it as little-endian 32-bit words, and
// the result is CBC-encrypted with the eboiv IV (the data cipher's
// encryption of a zero block under the IV o). Reading does the inverse after
// CBC decryption: Diffuser B and A backwards, then the XOR with Ks.

const elephantMaxKey = 32 // ELEPHANT_MAX_KEY_SIZE

func init() {
	dataModes["elephant"] = newElephant
}

type elephantMode struct {
	ecb        *capi.Tfm // ecb(aes) keyed with the second key half
	ivSize     int
	sectorSize uint64
}

func newElephant(c *Cipher, alg *capi.Alg, key []byte) (dataMode, error) {
	s := c.spec
	extra := len(key) / 2
	if extra > elephantMaxKey {
		return nil, fmt.Errorf("%w: %s: elephant takes at most a %d-bit key", ErrInvalidKey, s, 2*elephantMaxKey*8)
	}
	// crypt_iv_eboiv_ctr: the IV is one encrypted cipher block.
	if c.ivSize == 0 || alg.BlockSize != c.ivSize {
		return nil, fmt.Errorf("%w: %s: elephant needs the block size of %s (%d) to equal its IV size (%d)", ErrInvalidSpec, s, s.CAPI, alg.BlockSize, c.ivSize)
	}
	ecb, err := capi.NewSkcipher("ecb(aes)", key[len(key)-extra:])
	if err != nil {
		return nil, fmt.Errorf("%w: %s: elephant sector key: %w", ErrInvalidKey, s, err)
	}
	if n := c.opts.SectorSize; n%32 != 0 || n/4 > elephantMaxWords {
		return nil, fmt.Errorf("%w: %s: elephant cannot diffuse %d-byte sectors", ErrInvalidOptions, s, n)
	}
	return &elephantMode{ecb: ecb, ivSize: c.ivSize, sectorSize: uint64(c.opts.SectorSize)}, nil
}

func (m *elephantMode) extraKeySize(_ *Spec, keyLen int) int { return keyLen / 2 }

func (m *elephantMode) wipe() { m.ecb.Wipe() }

// dataScratch holds the small buffers the data modes hand to transforms.
// On the stack they would escape (the transforms are interfaces), costing
// allocations per sector; pooled they cost none.
type dataScratch struct {
	iv, ks, blk [32]byte
	zero        [32]byte // never written
}

var dataScratchPool = sync.Pool{New: func() any { return new(dataScratch) }}

func getDataScratch() *dataScratch { return dataScratchPool.Get().(*dataScratch) }

func putDataScratch(s *dataScratch) {
	clear(s.iv[:])
	clear(s.ks[:])
	clear(s.blk[:])
	dataScratchPool.Put(s)
}

// sectorKey computes Ks for IV sector n into s.ks.
func (m *elephantMode) sectorKey(s *dataScratch, n uint64) error {
	es := s.blk[:16]
	clear(es)
	binary.LittleEndian.PutUint64(es, n*m.sectorSize)
	if err := m.ecb.Encrypt(s.ks[:16], es, nil); err != nil {
		return err
	}
	es[15] = 0x80
	return m.ecb.Encrypt(s.ks[16:], es, nil)
}

// eboiv is crypt_iv_eboiv_gen: the first data transform encrypts a zero
// block with the little-endian byte offset as IV. The IV lands in s.iv.
func (m *elephantMode) eboiv(c *Cipher, s *dataScratch, n uint64) error {
	off := s.blk[:m.ivSize]
	clear(off)
	binary.LittleEndian.PutUint64(off, n*m.sectorSize)
	return c.tfms[0].Encrypt(s.iv[:m.ivSize], s.zero[:m.ivSize], off)
}

func (m *elephantMode) encrypt(c *Cipher, tfm *capi.Tfm, dst, src []byte, ivSector uint64) error {
	s := getDataScratch()
	defer putDataScratch(s)
	if err := m.sectorKey(s, ivSector); err != nil {
		return err
	}
	var w [elephantMaxWords]uint32
	d := w[:len(src)/4]
	for i := range d {
		d[i] = binary.LittleEndian.Uint32(src[4*i:]) ^ binary.LittleEndian.Uint32(s.ks[4*i&31:])
	}
	diffuserAEncrypt(d)
	diffuserBEncrypt(d)
	for i, v := range d {
		binary.LittleEndian.PutUint32(dst[4*i:], v)
	}
	clear(d)
	if err := m.eboiv(c, s, ivSector); err != nil {
		return err
	}
	return tfm.Encrypt(dst, dst, s.iv[:m.ivSize])
}

func (m *elephantMode) decrypt(c *Cipher, tfm *capi.Tfm, dst, src []byte, ivSector uint64) error {
	s := getDataScratch()
	defer putDataScratch(s)
	if err := m.eboiv(c, s, ivSector); err != nil {
		return err
	}
	if err := tfm.Decrypt(dst, src, s.iv[:m.ivSize]); err != nil {
		return err
	}
	if err := m.sectorKey(s, ivSector); err != nil {
		return err
	}
	var w [elephantMaxWords]uint32
	d := w[:len(dst)/4]
	for i := range d {
		d[i] = binary.LittleEndian.Uint32(dst[4*i:])
	}
	diffuserBDecrypt(d)
	diffuserADecrypt(d)
	for i, v := range d {
		binary.LittleEndian.PutUint32(dst[4*i:], v^binary.LittleEndian.Uint32(s.ks[4*i&31:]))
	}
	clear(d)
	return nil
}

const elephantMaxWords = 4096 / 4

// The diffusers, word for word as dm-crypt has them (from Microsoft's
// "AES-CBC + Elephant diffuser" paper). "decrypt" is the direction used
// after CBC decryption, "encrypt" its inverse used before CBC encryption.

func diffuserADecrypt(d []uint32) {
	n := len(d)
	for r := 0; r < 5; r++ {
		i1, i2, i3 := 0, n-2, n-5
		for i1 < n-1 {
			d[i1] += d[i2] ^ bits.RotateLeft32(d[i3], 9)
			i1, i2, i3 = i1+1, i2+1, i3+1
			if i3 >= n {
				i3 -= n
			}
			d[i1] += d[i2] ^ d[i3]
			i1, i2, i3 = i1+1, i2+1, i3+1
			if i2 >= n {
				i2 -= n
			}
			d[i1] += d[i2] ^ bits.RotateLeft32(d[i3], 13)
			i1, i2, i3 = i1+1, i2+1, i3+1
			d[i1] += d[i2] ^ d[i3]
			i1, i2, i3 = i1+1, i2+1, i3+1
		}
	}
}

func diffuserAEncrypt(d []uint32) {
	n := len(d)
	for r := 0; r < 5; r++ {
		i1, i2, i3 := n-1, n-2-1, n-5-1
		for i1 > 0 {
			d[i1] -= d[i2] ^ d[i3]
			i1, i2, i3 = i1-1, i2-1, i3-1
			d[i1] -= d[i2] ^ bits.RotateLeft32(d[i3], 13)
			i1, i2, i3 = i1-1, i2-1, i3-1
			if i2 < 0 {
				i2 += n
			}
			d[i1] -= d[i2] ^ d[i3]
			i1, i2, i3 = i1-1, i2-1, i3-1
			if i3 < 0 {
				i3 += n
			}
			d[i1] -= d[i2] ^ bits.RotateLeft32(d[i3], 9)
			i1, i2, i3 = i1-1, i2-1, i3-1
		}
	}
}

func diffuserBDecrypt(d []uint32) {
	n := len(d)
	for r := 0; r < 3; r++ {
		i1, i2, i3 := 0, 2, 5
		for i1 < n-1 {
			d[i1] += d[i2] ^ d[i3]
			i1, i2, i3 = i1+1, i2+1, i3+1
			d[i1] += d[i2] ^ bits.RotateLeft32(d[i3], 10)
			i1, i2, i3 = i1+1, i2+1, i3+1
			if i2 >= n {
				i2 -= n
			}
			d[i1] += d[i2] ^ d[i3]
			i1, i2, i3 = i1+1, i2+1, i3+1
			if i3 >= n {
				i3 -= n
			}
			d[i1] += d[i2] ^ bits.RotateLeft32(d[i3], 25)
			i1, i2, i3 = i1+1, i2+1, i3+1
		}
	}
}

func diffuserBEncrypt(d []uint32) {
	n := len(d)
	for r := 0; r < 3; r++ {
		i1, i2, i3 := n-1, 2-1, 5-1
		for i1 > 0 {
			d[i1] -= d[i2] ^ bits.RotateLeft32(d[i3], 25)
			i1, i2, i3 = i1-1, i2-1, i3-1
			if i3 < 0 {
				i3 += n
			}
			d[i1] -= d[i2] ^ d[i3]
			i1, i2, i3 = i1-1, i2-1, i3-1
			if i2 < 0 {
				i2 += n
			}
			d[i1] -= d[i2] ^ bits.RotateLeft32(d[i3], 10)
			i1, i2, i3 = i1-1, i2-1, i3-1
			d[i1] -= d[i2] ^ d[i3]
			i1, i2, i3 = i1-1, i2-1, i3-1
		}
	}
}
