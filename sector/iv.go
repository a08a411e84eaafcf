package sector

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync"

	"github.com/blkcrypt/blkcrypt/capi"
)

// IV generators, as drivers/md/dm-crypt.c defines them. n is the IV sector
// number: 512-byte units, or SectorSize units with LargeIV.

type ivPlain struct{} // low 32 bits of n, little-endian

func (ivPlain) generate(ivs []byte, size int, n, step uint64, count int) {
	clear(ivs[:size*count])
	for i := 0; i < count; i++ {
		binary.LittleEndian.PutUint32(ivs[i*size:], uint32(n+uint64(i)*step))
	}
}

type ivPlain64 struct{} // n, little-endian; also the input of essiv

func (ivPlain64) generate(ivs []byte, size int, n, step uint64, count int) {
	clear(ivs[:size*count])
	for i := 0; i < count; i++ {
		binary.LittleEndian.PutUint64(ivs[i*size:], n+uint64(i)*step)
	}
}

type ivPlain64BE struct{} // n, big-endian, in the last 8 bytes

func (ivPlain64BE) generate(ivs []byte, size int, n, step uint64, count int) {
	clear(ivs[:size*count])
	for i := 0; i < count; i++ {
		binary.BigEndian.PutUint64(ivs[(i+1)*size-8:], n+uint64(i)*step)
	}
}

type ivNull struct{}

func (ivNull) generate(ivs []byte, size int, _, _ uint64, count int) { clear(ivs[:size*count]) }

// ivBenbi is the 1-based big-endian count of cipher blocks: (n << shift) + 1
// with shift = 9 - log2(block size), for LRW and other narrow-block modes.
type ivBenbi struct{ shift uint }

func (b ivBenbi) generate(ivs []byte, size int, n, step uint64, count int) {
	clear(ivs[:size*count])
	for i := 0; i < count; i++ {
		binary.BigEndian.PutUint64(ivs[(i+1)*size-8:], (n+uint64(i)*step)<<b.shift+1)
	}
}

// ivEBOIV is BitLocker's encrypted byte-offset IV: the data transform,
// with a zero IV, applied to n*SectorSize as a little-endian 64-bit number.
type ivEBOIV struct {
	tfm        *capi.Tfm
	sectorSize uint64
	zero       [32]byte
}

var eboivPool = sync.Pool{New: func() any { return new([32]byte) }}

func (e *ivEBOIV) generate(ivs []byte, size int, n, step uint64, count int) {
	clear(ivs[:size*count])
	for i := 0; i < count; i++ {
		iv := ivs[i*size : (i+1)*size]
		binary.LittleEndian.PutUint64(iv, (n+uint64(i)*step)*e.sectorSize)
		e.tfm.Encrypt(iv, iv, e.zero[:size]) //nolint:errcheck // lengths fixed at setup
	}
}

// setupIV picks the IV generator for the spec. Generators that need the key
// are finished by keyIV once the subkeys exist.
func (c *Cipher) setupIV(alg *capi.Alg, key []byte) error {
	s := c.spec
	switch s.IVMode {
	case "", "null":
		c.iv = ivNull{}
	case "plain":
		c.iv = ivPlain{}
	case "plain64", "essiv":
		c.iv = ivPlain64{}
	case "plain64be":
		c.iv = ivPlain64BE{}
	case "benbi":
		bs := alg.BlockSize
		if alg.Base != nil {
			bs = alg.Base.BlockSize
		}
		if bs <= 0 || bs&(bs-1) != 0 || bs > 512 {
			return fmt.Errorf("%w: %s: benbi needs a power-of-two cipher block size", ErrInvalidSpec, s)
		}
		c.iv = ivBenbi{shift: 9 - uint(bits.TrailingZeros(uint(bs)))}
	case "eboiv":
		if c.ivSize < 8 {
			return fmt.Errorf("%w: %s: eboiv needs an IV of at least 8 bytes", ErrInvalidSpec, s)
		}
		c.iv = &ivEBOIV{sectorSize: uint64(c.opts.SectorSize)}
	default:
		m, err := newDataMode(c, alg, key)
		if err != nil {
			return err
		}
		c.data = m
		c.iv = ivNull{}
	}
	if s.IVMode != "" && c.ivSize == 0 {
		return fmt.Errorf("%w: %s: %s takes no IV, but IV mode %s was given", ErrInvalidSpec, s, s.CAPI, s.IVMode)
	}
	return nil
}

// keyIV finishes IV generators that use the data key.
func (c *Cipher) keyIV(alg *capi.Alg, key []byte, sub int) error {
	if e, ok := c.iv.(*ivEBOIV); ok {
		if !c.tfms[0].ValidLength(c.ivSize) {
			return fmt.Errorf("%w: %s: eboiv cannot encrypt a %d-byte IV with %s", ErrInvalidSpec, c.spec, c.ivSize, alg.Name)
		}
		e.tfm = c.tfms[0]
	}
	return nil
}

// dataModes are registered by the files implementing lmk, tcw and elephant.
var dataModes = map[string]func(c *Cipher, alg *capi.Alg, key []byte) (dataMode, error){}

func newDataMode(c *Cipher, alg *capi.Alg, key []byte) (dataMode, error) {
	f, ok := dataModes[c.spec.IVMode]
	if !ok {
		return nil, fmt.Errorf("%w: %s: IV mode %s is not implemented", ErrUnsupported, c.spec, c.spec.IVMode)
	}
	return f(c, alg, key)
}
