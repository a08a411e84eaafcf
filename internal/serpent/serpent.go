// Package serpent implements the Serpent block cipher with the byte order
// of the Linux kernel's "serpent" algorithm (crypto/serpent_generic.c), the
// one dm-crypt and cryptsetup use.
//
// The kernel reads the key and every 16-byte block as little-endian 32-bit
// words: block bytes 0..3 form word X0 (bytes 0 is its least significant
// byte), bytes 4..7 form X1 and so on, and the key is read the same way into
// the words w[-8..-1] of the Serpent key schedule. This is the "bitslice
// mode" description of the cipher in the Serpent paper. The kernel's other
// variant, "tnepres", reverses the byte order of key and blocks; it is not
// implemented here.
//
// Keys of 0 to 32 bytes are accepted. A key shorter than 256 bits is padded
// as the Serpent specification says: one 1 bit is appended just above the
// most significant key bit (byte value 0x01 at offset len(key)) and the rest
// is filled with zeros.
//
// Single blocks always run the Go code. The bulk methods (EncryptBlocks,
// the CBC methods and XTS) also have an AVX2 implementation on amd64, which
// runs 16 blocks at once bitsliced across the lanes of ymm registers; see
// Impls. The purego build tag leaves only the Go code.
package serpent

//go:generate sh -c "cd _asm && go run . -sbox ../sbox.go"

import (
	"crypto/cipher"
	"encoding/binary"
	"math/bits"
	"strconv"
)

// BlockSize is the Serpent block size in bytes.
const BlockSize = 16

// MaxKeySize is the largest key size in bytes.
const MaxKeySize = 32

// phi is the fractional part of the golden ratio, used in the key schedule.
const phi = 0x9e3779b9

// KeySizeError is returned by NewCipher for keys longer than 32 bytes.
type KeySizeError int

func (k KeySizeError) Error() string {
	return "serpent: invalid key size " + strconv.Itoa(int(k))
}

// Cipher is a Serpent instance with an expanded key. It implements
// crypto/cipher.Block.
type Cipher struct {
	k    [33][4]uint32 // round keys K0..K32
	avx2 bool          // bulk methods use the AVX2 kernels
}

var _ cipher.Block = (*Cipher)(nil)

// NewCipher expands key (0 to 32 bytes) into a Serpent cipher whose bulk
// methods use the fastest implementation this CPU has (see Impls).
func NewCipher(key []byte) (*Cipher, error) {
	return NewImpl(Impls()[0], key)
}

func (c *Cipher) expandKey(key []byte) {
	var kb [32]byte
	copy(kb[:], key)
	if len(key) < 32 {
		kb[len(key)] = 0x01
	}

	// Prekeys w[-8..131] kept in a rolling window of eight words, written
	// straight into the round key array (w_i lands at k[i/4][i%4]).
	var w [8]uint32
	for i := range w {
		w[i] = binary.LittleEndian.Uint32(kb[4*i:])
	}
	for i := 0; i < 132; i++ {
		// w[i] = (w[i-8] ^ w[i-5] ^ w[i-3] ^ w[i-1] ^ phi ^ i) <<< 11
		v := w[i&7] ^ w[(i+3)&7] ^ w[(i+5)&7] ^ w[(i+7)&7] ^ phi ^ uint32(i)
		v = bits.RotateLeft32(v, 11)
		w[i&7] = v
		c.k[i/4][i%4] = v
	}
	clear(kb[:])
	clear(w[:])

	// Round key K_i = S_{(3-i) mod 8}(w[4i..4i+3]).
	for i := range c.k {
		k := &c.k[i]
		a, b, d, e := k[0], k[1], k[2], k[3]
		switch (3 - i) & 7 {
		case 0:
			a, b, d, e = sb0(a, b, d, e)
		case 1:
			a, b, d, e = sb1(a, b, d, e)
		case 2:
			a, b, d, e = sb2(a, b, d, e)
		case 3:
			a, b, d, e = sb3(a, b, d, e)
		case 4:
			a, b, d, e = sb4(a, b, d, e)
		case 5:
			a, b, d, e = sb5(a, b, d, e)
		case 6:
			a, b, d, e = sb6(a, b, d, e)
		case 7:
			a, b, d, e = sb7(a, b, d, e)
		}
		k[0], k[1], k[2], k[3] = a, b, d, e
	}
}

// BlockSize returns 16.
func (c *Cipher) BlockSize() int { return BlockSize }

// Encrypt encrypts the first 16 bytes of src into dst. dst and src may
// overlap entirely.
func (c *Cipher) Encrypt(dst, src []byte) {
	if len(src) < BlockSize {
		panic("serpent: input not full block")
	}
	if len(dst) < BlockSize {
		panic("serpent: output not full block")
	}
	x0, x1, x2, x3 := encryptWords(&c.k,
		binary.LittleEndian.Uint32(src[0:4]),
		binary.LittleEndian.Uint32(src[4:8]),
		binary.LittleEndian.Uint32(src[8:12]),
		binary.LittleEndian.Uint32(src[12:16]))
	binary.LittleEndian.PutUint32(dst[0:4], x0)
	binary.LittleEndian.PutUint32(dst[4:8], x1)
	binary.LittleEndian.PutUint32(dst[8:12], x2)
	binary.LittleEndian.PutUint32(dst[12:16], x3)
}

// Decrypt decrypts the first 16 bytes of src into dst. dst and src may
// overlap entirely.
func (c *Cipher) Decrypt(dst, src []byte) {
	if len(src) < BlockSize {
		panic("serpent: input not full block")
	}
	if len(dst) < BlockSize {
		panic("serpent: output not full block")
	}
	x0, x1, x2, x3 := decryptWords(&c.k,
		binary.LittleEndian.Uint32(src[0:4]),
		binary.LittleEndian.Uint32(src[4:8]),
		binary.LittleEndian.Uint32(src[8:12]),
		binary.LittleEndian.Uint32(src[12:16]))
	binary.LittleEndian.PutUint32(dst[0:4], x0)
	binary.LittleEndian.PutUint32(dst[4:8], x1)
	binary.LittleEndian.PutUint32(dst[8:12], x2)
	binary.LittleEndian.PutUint32(dst[12:16], x3)
}

// Wipe zeroes the expanded key. The Cipher must not be used afterwards
// (it would then encrypt with an all-zero key schedule).
func (c *Cipher) Wipe() {
	clear(c.k[:])
}
