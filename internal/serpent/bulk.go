package serpent

import (
	"encoding/binary"
	"errors"
	"strconv"
	"unsafe"
)

// Single blocks always take the Go code: one block in an 8-lane kernel
// costs as much as eight. The bulk methods below are where the
// implementations differ.

// Impls returns the implementations usable on this CPU, fastest first:
// "avx2" (16 blocks bitsliced across ymm lanes) where the CPU has AVX2 and
// the build has the assembly, and always "generic", the Go code.
func Impls() []string {
	if hasAVX2 {
		return []string{"avx2", "generic"}
	}
	return []string{"generic"}
}

// NewImpl expands key (0 to 32 bytes) for the named implementation. It
// fails if the name is unknown or the implementation cannot run here.
func NewImpl(impl string, key []byte) (*Cipher, error) {
	if len(key) > MaxKeySize {
		return nil, KeySizeError(len(key))
	}
	c := new(Cipher)
	switch impl {
	case "generic":
	case "avx2":
		if !hasAVX2 {
			return nil, errors.New("serpent: implementation \"avx2\" is not supported on this CPU or build")
		}
		c.avx2 = true
	default:
		return nil, errors.New("serpent: unknown implementation " + strconv.Quote(impl))
	}
	c.expandKey(key)
	return c, nil
}

// Impl returns the name of the implementation c's bulk methods use.
func (c *Cipher) Impl() string {
	if c.avx2 {
		return "avx2"
	}
	return "generic"
}

// inexactOverlap reports whether x and y share memory at different
// offsets; the bulk methods allow only exact aliasing (in place).
func inexactOverlap(x, y []byte) bool {
	if len(x) == 0 || len(y) == 0 {
		return false
	}
	xp := uintptr(unsafe.Pointer(unsafe.SliceData(x)))
	yp := uintptr(unsafe.Pointer(unsafe.SliceData(y)))
	return xp != yp && xp < yp+uintptr(len(y)) && yp < xp+uintptr(len(x))
}

// check panics on the misuse the kernels cannot survive: they write whole
// groups of blocks through raw pointers.
func check(dst, src []byte, unit int) {
	if len(src)%unit != 0 {
		panic("serpent: input not a multiple of " + strconv.Itoa(unit) + " bytes")
	}
	if len(dst) < len(src) {
		panic("serpent: output smaller than input")
	}
	if inexactOverlap(dst[:len(src)], src) {
		panic("serpent: invalid buffer overlap")
	}
}

// checkSectors is check for a batch of sectors of a multiple of unit
// bytes, with an IV each; it returns the number of sectors.
func checkSectors(dst, src []byte, sectorSize int, ivs []byte, unit int) int {
	if sectorSize < unit || sectorSize%unit != 0 {
		panic("serpent: sector size " + strconv.Itoa(sectorSize) + " is not a positive multiple of " + strconv.Itoa(unit))
	}
	check(dst, src, sectorSize)
	ns := len(src) / sectorSize
	if len(ivs) < BlockSize*ns {
		panic("serpent: too few IVs")
	}
	return ns
}

// tailKernel is the smallest padded group used for a tail shorter than 8
// blocks: below it the Go code per block is cheaper than a whole 8-block
// kernel call.
const tailKernel = 3

// EncryptBlocks encrypts len(src)/16 blocks (ECB). len(src) must be a
// multiple of 16; dst and src may be the same slice but must not otherwise
// overlap.
func (c *Cipher) EncryptBlocks(dst, src []byte) {
	check(dst, src, BlockSize)
	c.ecb(dst, src, true)
}

// DecryptBlocks decrypts len(src)/16 blocks (ECB), with EncryptBlocks'
// rules.
func (c *Cipher) DecryptBlocks(dst, src []byte) {
	check(dst, src, BlockSize)
	c.ecb(dst, src, false)
}

func (c *Cipher) ecb(dst, src []byte, enc bool) {
	n := len(src) / BlockSize
	i := 0
	if c.avx2 {
		if g := n / 16; g > 0 {
			if enc {
				encECB16AVX2(&c.k, &dst[0], &src[0], g)
			} else {
				decECB16AVX2(&c.k, &dst[0], &src[0], g)
			}
			i = 16 * g
		}
		if n-i >= 8 {
			if enc {
				encECB8AVX2(&c.k, &dst[16*i], &src[16*i], 1)
			} else {
				decECB8AVX2(&c.k, &dst[16*i], &src[16*i], 1)
			}
			i += 8
		}
		if r := n - i; r >= tailKernel {
			var buf [8 * BlockSize]byte
			copy(buf[:], src[16*i:])
			if enc {
				encECB8AVX2(&c.k, &buf[0], &buf[0], 1)
			} else {
				decECB8AVX2(&c.k, &buf[0], &buf[0], 1)
			}
			copy(dst[16*i:16*n], buf[:])
			clear(buf[:])
			return
		}
	}
	for ; i < n; i++ {
		if enc {
			c.Encrypt(dst[16*i:], src[16*i:])
		} else {
			c.Decrypt(dst[16*i:], src[16*i:])
		}
	}
}

// EncryptCBC encrypts src in CBC mode with iv. CBC encryption is a serial
// chain, so one request runs one block at a time whatever the
// implementation; EncryptCBCSectors runs many chains side by side.
func (c *Cipher) EncryptCBC(dst, src []byte, iv *[BlockSize]byte) {
	check(dst, src, BlockSize)
	c.encryptCBC(dst, src, iv[:])
}

func (c *Cipher) encryptCBC(dst, src, iv []byte) {
	prev := iv
	for i := 0; i < len(src); i += BlockSize {
		d := dst[i : i+BlockSize]
		x0, x1, x2, x3 := encryptWords(&c.k,
			binary.LittleEndian.Uint32(src[i:])^binary.LittleEndian.Uint32(prev[0:]),
			binary.LittleEndian.Uint32(src[i+4:])^binary.LittleEndian.Uint32(prev[4:]),
			binary.LittleEndian.Uint32(src[i+8:])^binary.LittleEndian.Uint32(prev[8:]),
			binary.LittleEndian.Uint32(src[i+12:])^binary.LittleEndian.Uint32(prev[12:]))
		binary.LittleEndian.PutUint32(d[0:], x0)
		binary.LittleEndian.PutUint32(d[4:], x1)
		binary.LittleEndian.PutUint32(d[8:], x2)
		binary.LittleEndian.PutUint32(d[12:], x3)
		prev = d
	}
}

// DecryptCBC decrypts src in CBC mode with iv; the blocks are independent
// and go through the kernels 16 at a time.
func (c *Cipher) DecryptCBC(dst, src []byte, iv *[BlockSize]byte) {
	check(dst, src, BlockSize)
	c.decryptCBC(dst, src, iv[:])
}

func (c *Cipher) decryptCBC(dst, src, iv []byte) {
	n := len(src) / BlockSize
	if !c.avx2 {
		// From the last block back, so that in place every block's
		// predecessor is still ciphertext when it is needed.
		for i := n - 1; i >= 0; i-- {
			prev := iv
			if i > 0 {
				prev = src[16*i-16:]
			}
			x0, x1, x2, x3 := decryptWords(&c.k,
				binary.LittleEndian.Uint32(src[16*i:]),
				binary.LittleEndian.Uint32(src[16*i+4:]),
				binary.LittleEndian.Uint32(src[16*i+8:]),
				binary.LittleEndian.Uint32(src[16*i+12:]))
			d := dst[16*i:]
			binary.LittleEndian.PutUint32(d[0:], x0^binary.LittleEndian.Uint32(prev[0:]))
			binary.LittleEndian.PutUint32(d[4:], x1^binary.LittleEndian.Uint32(prev[4:]))
			binary.LittleEndian.PutUint32(d[8:], x2^binary.LittleEndian.Uint32(prev[8:]))
			binary.LittleEndian.PutUint32(d[12:], x3^binary.LittleEndian.Uint32(prev[12:]))
		}
		return
	}
	// The kernels run their groups from the end backwards, for the same
	// reason: the tail before them is chained to their first block's
	// predecessor, so it goes last.
	g := n / 16
	head := n - 16*g
	if g > 0 {
		prev := &iv[0]
		if head > 0 {
			prev = &src[16*head-16]
		}
		decCBC16AVX2(&c.k, &dst[16*head], &src[16*head], g, prev)
	}
	if head >= 8 {
		head -= 8
		prev := &iv[0]
		if head > 0 {
			prev = &src[16*head-16]
		}
		decCBC8AVX2(&c.k, &dst[16*head], &src[16*head], 1, prev)
	}
	if head > 0 {
		var buf [8 * BlockSize]byte
		copy(buf[:], src[:16*head])
		decCBC8AVX2(&c.k, &buf[0], &buf[0], 1, &iv[0])
		copy(dst[:16*head], buf[:])
		clear(buf[:])
	}
}

// EncryptCBCSectors encrypts len(src)/sectorSize CBC requests, request i
// with the IV at ivs[16i:]. With AVX2 up to 16 requests advance through
// the rounds side by side, one per lane. ivs is not modified.
func (c *Cipher) EncryptCBCSectors(dst, src []byte, sectorSize int, ivs []byte) {
	ns := checkSectors(dst, src, sectorSize, ivs, BlockSize)
	s := 0
	if c.avx2 {
		nb := sectorSize / BlockSize
		var offs [16]int
		for l := range offs {
			offs[l] = l * sectorSize
		}
		for ; ns-s >= 16; s += 16 {
			encCBCMB16AVX2(&c.k, &dst[s*sectorSize], &src[s*sectorSize], &offs, nb, &ivs[16*s])
		}
		// A short batch fills the spare lanes with copies of its last
		// request: equal work on equal data stores equal bytes.
		if r := ns - s; r > 1 {
			var v [16 * BlockSize]byte
			lanes := 16
			if r <= 8 {
				lanes = 8
			}
			for l := 0; l < lanes; l++ {
				k := min(l, r-1)
				offs[l] = k * sectorSize
				copy(v[16*l:16*l+16], ivs[16*(s+k):])
			}
			if lanes == 8 {
				encCBCMB8AVX2(&c.k, &dst[s*sectorSize], &src[s*sectorSize], &offs, nb, &v[0])
			} else {
				encCBCMB16AVX2(&c.k, &dst[s*sectorSize], &src[s*sectorSize], &offs, nb, &v[0])
			}
			s = ns
		}
	}
	for ; s < ns; s++ {
		c.encryptCBC(dst[s*sectorSize:(s+1)*sectorSize], src[s*sectorSize:(s+1)*sectorSize], ivs[16*s:16*s+16])
	}
}

// DecryptCBCSectors decrypts len(src)/sectorSize CBC requests, request i
// with the IV at ivs[16i:]. ivs is not modified.
func (c *Cipher) DecryptCBCSectors(dst, src []byte, sectorSize int, ivs []byte) {
	ns := checkSectors(dst, src, sectorSize, ivs, BlockSize)
	for s := 0; s < ns; s++ {
		c.decryptCBC(dst[s*sectorSize:(s+1)*sectorSize], src[s*sectorSize:(s+1)*sectorSize], ivs[16*s:16*s+16])
	}
}
