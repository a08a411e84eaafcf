// Package streebog implements the GOST R 34.11-2012 hash function
// "Streebog" (RFC 6986) with 512- and 256-bit digests: the Linux kernel's
// streebog512 and streebog256, which VeraCrypt uses as the PBKDF2 PRF
// HMAC-Streebog-512.
//
// RFC 6986 prints every vector as a big integer, most significant byte
// first. As byte strings (the kernel, OpenSSL's gost engine, VeraCrypt) a
// message and a digest are those integers little-endian: the first byte of
// the message is the least significant byte of its first 512-bit block, and
// the RFC's hex strings read backwards. The state is kept the same way, as
// eight little-endian 64-bit words, word 0 least significant.
//
// S, P and L are merged into eight tables of 256 words built at start-up
// from pi and A, so one LPS costs 64 look-ups.
package streebog

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash"
	"math/bits"

	"github.com/blkcrypt/blkcrypt/internal/gost"
)

// Digest sizes and the block size, in bytes.
const (
	Size256   = 32
	Size512   = 64
	BlockSize = 64
)

// tau is the byte permutation of RFC 6986 section 6.3. lpsXor relies on it
// being the transpose of the state as an 8x8 byte matrix
// (tau(8i+k) = 8k+i); TestTau checks that.
var tau = [64]byte{
	0, 8, 16, 24, 32, 40, 48, 56,
	1, 9, 17, 25, 33, 41, 49, 57,
	2, 10, 18, 26, 34, 42, 50, 58,
	3, 11, 19, 27, 35, 43, 51, 59,
	4, 12, 20, 28, 36, 44, 52, 60,
	5, 13, 21, 29, 37, 45, 53, 61,
	6, 14, 22, 30, 38, 46, 54, 62,
	7, 15, 23, 31, 39, 47, 55, 63,
}

// a holds the rows of the matrix A of the linear map l (RFC 6986 section
// 6.4), row 0 first. Bit 63 of l's input selects row 0, bit 0 row 63.
var a = [64]uint64{
	0x8e20faa72ba0b470, 0x47107ddd9b505a38, 0xad08b0e0c3282d1c, 0xd8045870ef14980e,
	0x6c022c38f90a4c07, 0x3601161cf205268d, 0x1b8e0b0e798c13c8, 0x83478b07b2468764,
	0xa011d380818e8f40, 0x5086e740ce47c920, 0x2843fd2067adea10, 0x14aff010bdd87508,
	0x0ad97808d06cb404, 0x05e23c0468365a02, 0x8c711e02341b2d01, 0x46b60f011a83988e,
	0x90dab52a387ae76f, 0x486dd4151c3dfdb9, 0x24b86a840e90f0d2, 0x125c354207487869,
	0x092e94218d243cba, 0x8a174a9ec8121e5d, 0x4585254f64090fa0, 0xaccc9ca9328a8950,
	0x9d4df05d5f661451, 0xc0a878a0a1330aa6, 0x60543c50de970553, 0x302a1e286fc58ca7,
	0x18150f14b9ec46dd, 0x0c84890ad27623e0, 0x0642ca05693b9f70, 0x0321658cba93c138,
	0x86275df09ce8aaa8, 0x439da0784e745554, 0xafc0503c273aa42a, 0xd960281e9d1d5215,
	0xe230140fc0802984, 0x71180a8960409a42, 0xb60c05ca30204d21, 0x5b068c651810a89e,
	0x456c34887a3805b9, 0xac361a443d1c8cd2, 0x561b0d22900e4669, 0x2b838811480723ba,
	0x9bcf4486248d9f5d, 0xc3e9224312c8c1a0, 0xeffa11af0964ee50, 0xf97d86d98a327728,
	0xe4fa2054a80b329c, 0x727d102a548b194e, 0x39b008152acb8227, 0x9258048415eb419d,
	0x492c024284fbaec0, 0xaa16012142f35760, 0x550b8e9e21f7a530, 0xa48b474f9ef5dc18,
	0x70a6a56e2440598e, 0x3853dc371220a247, 0x1ca76e95091051ad, 0x0edd37c48a08a6d8,
	0x07e095624504536c, 0x8d70c431ac02a736, 0xc83862965601dd1b, 0x641c314b2b8ee083,
}

// cHex holds the iteration constants C[1]..C[12] of RFC 6986 section 6.5
// exactly as printed there: a 512-bit integer, most significant digit first.
var cHex = [12]string{
	"b1085bda1ecadae9ebcb2f81c0657c1f2f6a76432e45d016714eb88d7585c4fc4b7ce09192676901a2422a08a460d31505767436cc744d23dd806559f2a64507",
	"6fa3b58aa99d2f1a4fe39d460f70b5d7f3feea720a232b9861d55e0f16b501319ab5176b12d699585cb561c2db0aa7ca55dda21bd7cbcd56e679047021b19bb7",
	"f574dcac2bce2fc70a39fc286a3d843506f15e5f529c1f8bf2ea7514b1297b7bd3e20fe490359eb1c1c93a376062db09c2b6f443867adb31991e96f50aba0ab2",
	"ef1fdfb3e81566d2f948e1a05d71e4dd488e857e335c3c7d9d721cad685e353fa9d72c82ed03d675d8b71333935203be3453eaa193e837f1220cbebc84e3d12e",
	"4bea6bacad4747999a3f410c6ca923637f151c1f1686104a359e35d7800fffbdbfcd1747253af5a3dfff00b723271a167a56a27ea9ea63f5601758fd7c6cfe57",
	"ae4faeae1d3ad3d96fa4c33b7a3039c02d66c4f95142a46c187f9ab49af08ec6cffaa6b71c9ab7b40af21f66c2bec6b6bf71c57236904f35fa68407a46647d6e",
	"f4c70e16eeaac5ec51ac86febf240954399ec6c7e6bf87c9d3473e33197a93c90992abc52d822c3706476983284a05043517454ca23c4af38886564d3a14d493",
	"9b1f5b424d93c9a703e7aa020c6e41414eb7f8719c36de1e89b4443b4ddbc49af4892bcb929b069069d18d2bd1a5c42f36acc2355951a8d9a47f0dd4bf02e71e",
	"378f5a541631229b944c9ad8ec165fde3a7d3a1b258942243cd955b7e00d0984800a440bdbb2ceb17b2b8a9aa6079c540e38dc92cb1f2a607261445183235adb",
	"abbedea680056f52382ae548b2e4f3f38941e71cff8a78db1fffe18a1b3361039fe76702af69334b7a1e6c303b7652f43698fad1153bb6c374b4c7fb98459ced",
	"7bcd9ed0efc889fb3002c6cd635afe94d8fa6bbbebab076120018021148466798a1d71efea48b9caefbacd1d7d476e98dea2594ac06fd85d6bcaa4cd81f32d1b",
	"378ee767f11631bad21380b00449b17acda43c32bcdf1d77f82012d430219f9b5d80ef9d1891cc86e71da4aa88e12852faf417d5d9b21b9948bc924af11bd720",
}

var (
	// lpsTab[k][v] is l applied to a 64-bit word whose byte k is gost.Pi[v] and
	// whose other bytes are zero: byte k of an output word of P comes from
	// input word k, and l is linear, so an output word of LPS is the XOR of
	// eight look-ups.
	lpsTab [8][256]uint64
	c      [12][8]uint64 // C[1]..C[12] as state words
)

func init() {
	for k := 0; k < 8; k++ {
		for v := 0; v < 256; v++ {
			lpsTab[k][v] = linear(uint64(gost.Pi[v]) << (8 * k))
		}
	}
	for i, s := range cHex {
		b, err := hex.DecodeString(s)
		if err != nil || len(b) != 64 {
			panic("streebog: bad iteration constant")
		}
		c[i] = wordsFromRFC(b)
	}
}

// linear is l of RFC 6986 section 6.4: the product of the bit row vector x
// (bit 63 first) with A.
func linear(x uint64) uint64 {
	var r uint64
	for i := 0; i < 64; i++ {
		if x>>(63-i)&1 != 0 {
			r ^= a[i]
		}
	}
	return r
}

// wordsFromRFC converts a 512-bit value printed RFC-style (most significant
// byte first) to state words.
func wordsFromRFC(b []byte) (w [8]uint64) {
	for i := range w {
		w[i] = binary.BigEndian.Uint64(b[56-8*i:])
	}
	return w
}

// lpsXor computes out = LPS(x xor y). Every LPS of RFC 6986 section 8 is
// applied to a XOR of two values; taking it here keeps X[K] in registers.
// The input is read in full before out is written, so out may be x or y.
func lpsXor(out, x, y *[8]uint64) {
	a0, a1, a2, a3 := x[0]^y[0], x[1]^y[1], x[2]^y[2], x[3]^y[3]
	a4, a5, a6, a7 := x[4]^y[4], x[5]^y[5], x[6]^y[6], x[7]^y[7]
	t0, t1, t2, t3 := &lpsTab[0], &lpsTab[1], &lpsTab[2], &lpsTab[3]
	t4, t5, t6, t7 := &lpsTab[4], &lpsTab[5], &lpsTab[6], &lpsTab[7]
	// Output word i takes byte i of every input word (tau is the
	// transpose); unrolled, as a loop of shifts is measurably slower.
	out[0] = t0[uint8(a0)] ^ t1[uint8(a1)] ^ t2[uint8(a2)] ^ t3[uint8(a3)] ^
		t4[uint8(a4)] ^ t5[uint8(a5)] ^ t6[uint8(a6)] ^ t7[uint8(a7)]
	out[1] = t0[uint8(a0>>8)] ^ t1[uint8(a1>>8)] ^ t2[uint8(a2>>8)] ^ t3[uint8(a3>>8)] ^
		t4[uint8(a4>>8)] ^ t5[uint8(a5>>8)] ^ t6[uint8(a6>>8)] ^ t7[uint8(a7>>8)]
	out[2] = t0[uint8(a0>>16)] ^ t1[uint8(a1>>16)] ^ t2[uint8(a2>>16)] ^ t3[uint8(a3>>16)] ^
		t4[uint8(a4>>16)] ^ t5[uint8(a5>>16)] ^ t6[uint8(a6>>16)] ^ t7[uint8(a7>>16)]
	out[3] = t0[uint8(a0>>24)] ^ t1[uint8(a1>>24)] ^ t2[uint8(a2>>24)] ^ t3[uint8(a3>>24)] ^
		t4[uint8(a4>>24)] ^ t5[uint8(a5>>24)] ^ t6[uint8(a6>>24)] ^ t7[uint8(a7>>24)]
	out[4] = t0[uint8(a0>>32)] ^ t1[uint8(a1>>32)] ^ t2[uint8(a2>>32)] ^ t3[uint8(a3>>32)] ^
		t4[uint8(a4>>32)] ^ t5[uint8(a5>>32)] ^ t6[uint8(a6>>32)] ^ t7[uint8(a7>>32)]
	out[5] = t0[uint8(a0>>40)] ^ t1[uint8(a1>>40)] ^ t2[uint8(a2>>40)] ^ t3[uint8(a3>>40)] ^
		t4[uint8(a4>>40)] ^ t5[uint8(a5>>40)] ^ t6[uint8(a6>>40)] ^ t7[uint8(a7>>40)]
	out[6] = t0[uint8(a0>>48)] ^ t1[uint8(a1>>48)] ^ t2[uint8(a2>>48)] ^ t3[uint8(a3>>48)] ^
		t4[uint8(a4>>48)] ^ t5[uint8(a5>>48)] ^ t6[uint8(a6>>48)] ^ t7[uint8(a7>>48)]
	out[7] = t0[uint8(a0>>56)] ^ t1[uint8(a1>>56)] ^ t2[uint8(a2>>56)] ^ t3[uint8(a3>>56)] ^
		t4[uint8(a4>>56)] ^ t5[uint8(a5>>56)] ^ t6[uint8(a6>>56)] ^ t7[uint8(a7>>56)]
}

// g is the compression function g_N(h, m) of RFC 6986 section 8; it
// updates h in place.
func g(h, n, m *[8]uint64) {
	// E(K, m) runs twelve rounds s := LPS(K[i] xor s), K[i+1] :=
	// LPS(K[i] xor C[i]), then XORs K[13]. The a and b buffers alternate
	// so that no round copies the state.
	var ka, kb, sa, sb [8]uint64
	lpsXor(&ka, h, n) // K[1]
	sa = *m
	for i := 0; i < len(c); i += 2 {
		lpsXor(&sb, &ka, &sa)
		lpsXor(&kb, &ka, &c[i])
		lpsXor(&sa, &kb, &sb)
		lpsXor(&ka, &kb, &c[i+1])
	}
	for i := range h {
		h[i] ^= ka[i] ^ sa[i] ^ m[i]
	}
}

// add512 sets x to x + y mod 2^512.
func add512(x, y *[8]uint64) {
	var carry uint64
	for i := range x {
		x[i], carry = bits.Add64(x[i], y[i], carry)
	}
}

// addSmall sets x to x + v mod 2^512.
func addSmall(x *[8]uint64, v uint64) {
	var carry uint64
	x[0], carry = bits.Add64(x[0], v, 0)
	for i := 1; i < len(x) && carry != 0; i++ {
		x[i], carry = bits.Add64(x[i], 0, carry)
	}
}

type digest struct {
	h, n, sigma [8]uint64 // h, N and EPSILON of RFC 6986 section 9
	x           [BlockSize]byte
	nx          int
	size        int
}

// New512 returns a hash.Hash computing Streebog-512.
func New512() hash.Hash { return newDigest(Size512) }

// New256 returns a hash.Hash computing Streebog-256.
func New256() hash.Hash { return newDigest(Size256) }

func newDigest(size int) *digest {
	d := &digest{size: size}
	d.Reset()
	return d
}

// Sum512 returns the Streebog-512 digest of data.
func Sum512(data []byte) [Size512]byte {
	d := digest{size: Size512}
	d.Reset()
	d.Write(data)
	return d.checkSum()
}

// Sum256 returns the Streebog-256 digest of data.
func Sum256(data []byte) [Size256]byte {
	d := digest{size: Size256}
	d.Reset()
	d.Write(data)
	s := d.checkSum()
	return [Size256]byte(s[Size256:])
}

func (d *digest) Reset() {
	// The 256-bit function starts from IV = (00000001)^64, the 512-bit one
	// from zero.
	var iv uint64
	if d.size == Size256 {
		iv = 0x0101010101010101
	}
	for i := range d.h {
		d.h[i] = iv
	}
	d.n = [8]uint64{}
	d.sigma = [8]uint64{}
	d.x = [BlockSize]byte{}
	d.nx = 0
}

func (d *digest) Size() int      { return d.size }
func (d *digest) BlockSize() int { return BlockSize }

// Clone returns an independent copy of the running hash (hash.Cloner).
func (d *digest) Clone() (hash.Cloner, error) {
	c := *d
	return &c, nil
}

func (d *digest) blocks(p []byte) {
	var m [8]uint64
	for len(p) >= BlockSize {
		for i := range m {
			m[i] = binary.LittleEndian.Uint64(p[8*i:])
		}
		g(&d.h, &d.n, &m)
		addSmall(&d.n, 8*BlockSize)
		add512(&d.sigma, &m)
		p = p[BlockSize:]
	}
}

func (d *digest) Write(p []byte) (int, error) {
	n := len(p)
	if d.nx > 0 {
		k := copy(d.x[d.nx:], p)
		d.nx += k
		p = p[k:]
		if d.nx < BlockSize {
			return n, nil
		}
		d.blocks(d.x[:])
		d.nx = 0
	}
	if len(p) >= BlockSize {
		k := len(p) &^ (BlockSize - 1)
		d.blocks(p[:k])
		p = p[k:]
	}
	d.nx = copy(d.x[:], p)
	return n, nil
}

func (d *digest) Sum(in []byte) []byte {
	c := *d // Sum must not change the running state
	sum := c.checkSum()
	return append(in, sum[Size512-d.size:]...)
}

// checkSum runs step 3 of RFC 6986 section 9 on d and returns h as bytes;
// the 256-bit digest is its upper half (MSB_256), bytes 32..63.
func (d *digest) checkSum() [Size512]byte {
	// m = 0^(511-|M|) || 1 || M: the remaining bytes, a 0x01 byte, zeros.
	var blk [BlockSize]byte
	copy(blk[:], d.x[:d.nx])
	blk[d.nx] = 1
	var m [8]uint64
	for i := range m {
		m[i] = binary.LittleEndian.Uint64(blk[8*i:])
	}
	g(&d.h, &d.n, &m)
	addSmall(&d.n, uint64(8*d.nx))
	add512(&d.sigma, &m)
	var zero [8]uint64
	g(&d.h, &zero, &d.n)
	g(&d.h, &zero, &d.sigma)
	var out [Size512]byte
	for i, v := range d.h {
		binary.LittleEndian.PutUint64(out[8*i:], v)
	}
	return out
}

// The marshalled state lets crypto/hmac and kdf save the keyed
// inner and outer states instead of rehashing the padded key on every
// PBKDF2 iteration.
const (
	magic256      = "sbg\x01"
	magic512      = "sbg\x02"
	marshaledSize = len(magic512) + 3*8*8 + BlockSize + 1
)

func (d *digest) MarshalBinary() ([]byte, error) {
	return d.AppendBinary(make([]byte, 0, marshaledSize))
}

func (d *digest) AppendBinary(b []byte) ([]byte, error) {
	if d.size == Size256 {
		b = append(b, magic256...)
	} else {
		b = append(b, magic512...)
	}
	for _, w := range [][8]uint64{d.h, d.n, d.sigma} {
		for _, v := range w {
			b = binary.LittleEndian.AppendUint64(b, v)
		}
	}
	b = append(b, d.x[:]...)
	b = append(b, byte(d.nx))
	return b, nil
}

func (d *digest) UnmarshalBinary(b []byte) error {
	want := magic512
	if d.size == Size256 {
		want = magic256
	}
	if len(b) < len(want) || string(b[:len(want)]) != want {
		return errors.New("streebog: invalid hash state identifier")
	}
	if len(b) != marshaledSize {
		return errors.New("streebog: invalid hash state size")
	}
	if nx := int(b[len(b)-1]); nx >= BlockSize {
		return errors.New("streebog: invalid hash state buffer length")
	}
	b = b[len(want):]
	for _, w := range []*[8]uint64{&d.h, &d.n, &d.sigma} {
		for i := range w {
			w[i] = binary.LittleEndian.Uint64(b)
			b = b[8:]
		}
	}
	copy(d.x[:], b[:BlockSize])
	d.nx = int(b[BlockSize])
	return nil
}
