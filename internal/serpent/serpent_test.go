package serpent

import (
	"bytes"
	"crypto/cipher"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
)

// Serpent S-boxes S0..S7 as printed in the Serpent specification; used to
// check the generated bitsliced circuits independently of their generator (_asm).
var specSboxes = [8][16]uint8{
	{3, 8, 15, 1, 10, 6, 5, 11, 14, 13, 4, 2, 7, 0, 9, 12},
	{15, 12, 2, 7, 9, 0, 5, 10, 1, 11, 14, 8, 6, 13, 3, 4},
	{8, 6, 7, 9, 3, 12, 10, 15, 13, 1, 14, 4, 0, 11, 5, 2},
	{0, 15, 11, 8, 12, 9, 6, 3, 13, 1, 2, 4, 10, 7, 5, 14},
	{1, 15, 8, 3, 12, 0, 11, 6, 2, 5, 4, 10, 9, 14, 7, 13},
	{15, 5, 2, 11, 4, 10, 9, 12, 0, 3, 14, 8, 13, 6, 7, 1},
	{7, 2, 12, 5, 8, 4, 6, 11, 14, 9, 1, 15, 13, 3, 10, 0},
	{1, 13, 15, 0, 14, 8, 2, 11, 7, 4, 12, 10, 9, 3, 5, 6},
}

type sboxFunc func(a, b, c, d uint32) (uint32, uint32, uint32, uint32)

var fwdFuncs = [8]sboxFunc{sb0, sb1, sb2, sb3, sb4, sb5, sb6, sb7}
var invFuncs = [8]sboxFunc{isb0, isb1, isb2, isb3, isb4, isb5, isb6, isb7}

func TestSboxCircuits(t *testing.T) {
	for i := 0; i < 8; i++ {
		var inv [16]uint8
		for x, y := range specSboxes[i] {
			inv[y] = uint8(x)
		}
		// Bit lane x of the input words holds nibble x (lanes 0..15), and
		// lanes 16..31 hold nibble 31-lane so both halves are exercised.
		var in [4]uint32
		for lane := 0; lane < 32; lane++ {
			nib := lane
			if lane >= 16 {
				nib = 31 - lane
			}
			for k := 0; k < 4; k++ {
				in[k] |= uint32(nib>>k&1) << lane
			}
		}
		check := func(name string, f sboxFunc, table [16]uint8) {
			o0, o1, o2, o3 := f(in[0], in[1], in[2], in[3])
			out := [4]uint32{o0, o1, o2, o3}
			for lane := 0; lane < 32; lane++ {
				nib := lane
				if lane >= 16 {
					nib = 31 - lane
				}
				var got uint8
				for k := 0; k < 4; k++ {
					got |= uint8(out[k]>>lane&1) << k
				}
				if got != table[nib] {
					t.Errorf("%s%d(%d) = %d, want %d", name, i, nib, got, table[nib])
				}
			}
		}
		check("S", fwdFuncs[i], specSboxes[i])
		check("S^-1 ", invFuncs[i], inv)
	}
}

// vector covers the fields of the kernel and cryptsetup vector files.
type vector struct {
	ID            string `json:"id"`
	Mode          string `json:"mode"`
	Cipher        string `json:"cipher"`
	Key           string `json:"key"`
	KeyHex        string `json:"key_hex"`
	IV            string `json:"iv"`
	IVHex         string `json:"iv_hex"`
	Plaintext     string `json:"plaintext"`
	PlaintextHex  string `json:"plaintext_hex"`
	Ciphertext    string `json:"ciphertext"`
	CiphertextHex string `json:"ciphertext_hex"`
}

type decoded struct {
	id, mode       string
	key, iv, pt, c []byte
}

func loadVectors(t *testing.T, file, defaultMode string) []decoded {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		VectorCount int      `json:"vector_count"`
		Vectors     []vector `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Vectors) == 0 || len(f.Vectors) != f.VectorCount {
		t.Fatalf("%s: %d vectors, vector_count %d", file, len(f.Vectors), f.VectorCount)
	}
	pick := func(a, b string) string {
		if a != "" {
			return a
		}
		return b
	}
	h := func(id, s string) []byte {
		b, err := hex.DecodeString(s)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		return b
	}
	var out []decoded
	for _, v := range f.Vectors {
		if v.Cipher != "" && v.Cipher != "serpent" {
			t.Fatalf("%s: cipher %q", v.ID, v.Cipher)
		}
		d := decoded{
			id:   v.ID,
			mode: pick(v.Mode, defaultMode),
			key:  h(v.ID, pick(v.Key, v.KeyHex)),
			iv:   h(v.ID, pick(v.IV, v.IVHex)),
			pt:   h(v.ID, pick(v.Plaintext, v.PlaintextHex)),
			c:    h(v.ID, pick(v.Ciphertext, v.CiphertextHex)),
		}
		if len(d.pt) != len(d.c) || len(d.pt)%BlockSize != 0 || len(d.pt) == 0 {
			t.Fatalf("%s: bad lengths %d/%d", v.ID, len(d.pt), len(d.c))
		}
		out = append(out, d)
	}
	return out
}

func mustCipher(t *testing.T, key []byte) *Cipher {
	t.Helper()
	c, err := NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ECB, CBC, XTS and LRW helpers over a cipher.Block, for the tests only.

func ecb(b cipher.Block, dst, src []byte, enc bool) {
	for i := 0; i < len(src); i += BlockSize {
		if enc {
			b.Encrypt(dst[i:], src[i:])
		} else {
			b.Decrypt(dst[i:], src[i:])
		}
	}
}

func cbcEncrypt(b cipher.Block, iv, dst, src []byte) {
	var prev [BlockSize]byte
	copy(prev[:], iv)
	for i := 0; i < len(src); i += BlockSize {
		var x [BlockSize]byte
		for j := range x {
			x[j] = src[i+j] ^ prev[j]
		}
		b.Encrypt(dst[i:], x[:])
		copy(prev[:], dst[i:i+BlockSize])
	}
}

func cbcDecrypt(b cipher.Block, iv, dst, src []byte) {
	var prev, cur [BlockSize]byte
	copy(prev[:], iv)
	for i := 0; i < len(src); i += BlockSize {
		copy(cur[:], src[i:i+BlockSize])
		b.Decrypt(dst[i:], cur[:])
		for j := 0; j < BlockSize; j++ {
			dst[i+j] ^= prev[j]
		}
		prev = cur
	}
}

// xtsMulAlpha multiplies the tweak by x in GF(2^128), little-endian
// (IEEE P1619) convention.
func xtsMulAlpha(t *[BlockSize]byte) {
	lo := binary.LittleEndian.Uint64(t[0:])
	hi := binary.LittleEndian.Uint64(t[8:])
	carry := hi >> 63
	hi = hi<<1 | lo>>63
	lo = lo<<1 ^ carry*0x87
	binary.LittleEndian.PutUint64(t[0:], lo)
	binary.LittleEndian.PutUint64(t[8:], hi)
}

// xts handles whole blocks only (no ciphertext stealing; not needed here).
func xts(t *testing.T, key, iv, dst, src []byte, enc bool) {
	k1 := mustCipher(t, key[:len(key)/2])
	k2 := mustCipher(t, key[len(key)/2:])
	var tw [BlockSize]byte
	k2.Encrypt(tw[:], iv)
	for i := 0; i < len(src); i += BlockSize {
		var x [BlockSize]byte
		for j := range x {
			x[j] = src[i+j] ^ tw[j]
		}
		if enc {
			k1.Encrypt(x[:], x[:])
		} else {
			k1.Decrypt(x[:], x[:])
		}
		for j := range x {
			dst[i+j] = x[j] ^ tw[j]
		}
		xtsMulAlpha(&tw)
	}
}

// gfMulBBE multiplies a and b in GF(2^128) with both read as big-endian
// 128-bit integers whose bit 0 is the x^0 coefficient, modulo
// x^128 + x^7 + x^2 + x + 1 (the LRW convention).
func gfMulBBE(a, b [BlockSize]byte) [BlockSize]byte {
	ah, al := binary.BigEndian.Uint64(a[0:]), binary.BigEndian.Uint64(a[8:])
	bh, bl := binary.BigEndian.Uint64(b[0:]), binary.BigEndian.Uint64(b[8:])
	var rh, rl uint64
	for i := 127; i >= 0; i-- {
		// r *= x
		carry := rh >> 63
		rh = rh<<1 | rl>>63
		rl = rl<<1 ^ carry*0x87
		var bit uint64
		if i >= 64 {
			bit = bh >> (i - 64) & 1
		} else {
			bit = bl >> i & 1
		}
		if bit != 0 {
			rh ^= ah
			rl ^= al
		}
	}
	var r [BlockSize]byte
	binary.BigEndian.PutUint64(r[0:], rh)
	binary.BigEndian.PutUint64(r[8:], rl)
	return r
}

// lrw: key = cipher key || 16-byte K2; iv = big-endian index of block 0;
// block j uses T = K2 * (I + j) and C = E(P ^ T) ^ T.
func lrw(t *testing.T, key, iv, dst, src []byte, enc bool) {
	c := mustCipher(t, key[:len(key)-BlockSize])
	var k2 [BlockSize]byte
	copy(k2[:], key[len(key)-BlockSize:])
	hi, lo := binary.BigEndian.Uint64(iv[0:]), binary.BigEndian.Uint64(iv[8:])
	for i := 0; i < len(src); i += BlockSize {
		var idx [BlockSize]byte
		binary.BigEndian.PutUint64(idx[0:], hi)
		binary.BigEndian.PutUint64(idx[8:], lo)
		tw := gfMulBBE(k2, idx)
		var x [BlockSize]byte
		for j := range x {
			x[j] = src[i+j] ^ tw[j]
		}
		if enc {
			c.Encrypt(x[:], x[:])
		} else {
			c.Decrypt(x[:], x[:])
		}
		for j := range x {
			dst[i+j] = x[j] ^ tw[j]
		}
		lo++
		if lo == 0 {
			hi++
		}
	}
}

func runVector(t *testing.T, v decoded) {
	got := make([]byte, len(v.pt))
	back := make([]byte, len(v.pt))
	switch v.mode {
	case "ecb":
		c := mustCipher(t, v.key)
		ecb(c, got, v.pt, true)
		ecb(c, back, v.c, false)
	case "cbc":
		c := mustCipher(t, v.key)
		cbcEncrypt(c, v.iv, got, v.pt)
		cbcDecrypt(c, v.iv, back, v.c)
	case "xts":
		xts(t, v.key, v.iv, got, v.pt, true)
		xts(t, v.key, v.iv, back, v.c, false)
	case "lrw":
		lrw(t, v.key, v.iv, got, v.pt, true)
		lrw(t, v.key, v.iv, back, v.c, false)
	default:
		t.Fatalf("%s: unknown mode %q", v.id, v.mode)
	}
	if !bytes.Equal(got, v.c) {
		t.Errorf("%s: encrypt\n got %x\nwant %x", v.id, got, v.c)
	}
	if !bytes.Equal(back, v.pt) {
		t.Errorf("%s: decrypt\n got %x\nwant %x", v.id, back, v.pt)
	}
}

func TestKernelECB(t *testing.T) {
	for _, v := range loadVectors(t, "kernel_ecb_serpent.json", "ecb") {
		runVector(t, v)
	}
}

func TestKernelModes(t *testing.T) {
	seen := map[string]int{}
	for _, v := range loadVectors(t, "kernel_other_ciphers_serpent.json", "") {
		runVector(t, v)
		seen[v.mode]++
	}
	for _, m := range []string{"cbc", "xts", "lrw"} {
		if seen[m] == 0 {
			t.Errorf("no %s vectors", m)
		}
	}
}

func TestCryptsetupVectors(t *testing.T) {
	for _, v := range loadVectors(t, "cryptsetup_block_ciphers_serpent.json", "") {
		runVector(t, v)
	}
}

// TestShortKeyPadding checks that a key shorter than 32 bytes behaves as
// the key padded with one 1 bit (byte 0x01) and zeros, for every length.
func TestShortKeyPadding(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	full := make([]byte, 32)
	rng.Read(full)
	pt := make([]byte, 16)
	rng.Read(pt)
	for n := 0; n < 32; n++ {
		padded := make([]byte, 32)
		copy(padded, full[:n])
		padded[n] = 1
		a, b := mustCipher(t, full[:n]), mustCipher(t, padded)
		var ca, cb [16]byte
		a.Encrypt(ca[:], pt)
		b.Encrypt(cb[:], pt)
		if ca != cb {
			t.Errorf("key length %d: padded key gives a different result", n)
		}
		a.Decrypt(ca[:], ca[:])
		if !bytes.Equal(ca[:], pt) {
			t.Errorf("key length %d: decrypt does not invert encrypt", n)
		}
	}
}

func TestKeySizes(t *testing.T) {
	for n := 0; n <= 40; n++ {
		c, err := NewCipher(make([]byte, n))
		if n <= 32 && (err != nil || c == nil) {
			t.Errorf("key length %d rejected: %v", n, err)
		}
		if n > 32 && err == nil {
			t.Errorf("key length %d accepted", n)
		}
	}
}

func TestRoundTripAndInPlace(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for i := 0; i < 200; i++ {
		key := make([]byte, []int{16, 24, 32}[i%3])
		rng.Read(key)
		c := mustCipher(t, key)
		var pt, ct, buf [16]byte
		rng.Read(pt[:])
		c.Encrypt(ct[:], pt[:])
		buf = pt
		c.Encrypt(buf[:], buf[:])
		if buf != ct {
			t.Fatal("in-place encrypt differs")
		}
		c.Decrypt(buf[:], buf[:])
		if buf != pt {
			t.Fatal("in-place decrypt does not invert encrypt")
		}
	}
}

func TestWipe(t *testing.T) {
	c := mustCipher(t, bytes.Repeat([]byte{0x5a}, 32))
	c.Wipe()
	for _, k := range c.k {
		if k != [4]uint32{} {
			t.Fatal("subkeys not zeroed")
		}
	}
}

func TestNoAllocs(t *testing.T) {
	c := mustCipher(t, make([]byte, 32))
	buf := make([]byte, 16)
	n := testing.AllocsPerRun(100, func() {
		c.Encrypt(buf, buf)
		c.Decrypt(buf, buf)
	})
	if n != 0 {
		t.Errorf("%v allocations per Encrypt+Decrypt", n)
	}
}

func TestShortBufferPanics(t *testing.T) {
	c := mustCipher(t, make([]byte, 16))
	for _, f := range []func(){
		func() { c.Encrypt(make([]byte, 16), make([]byte, 15)) },
		func() { c.Encrypt(make([]byte, 15), make([]byte, 16)) },
		func() { c.Decrypt(make([]byte, 16), make([]byte, 15)) },
		func() { c.Decrypt(make([]byte, 15), make([]byte, 16)) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("no panic on short buffer")
				}
			}()
			f()
		}()
	}
}

func BenchmarkEncrypt(b *testing.B) {
	c, _ := NewCipher(make([]byte, 32))
	buf := make([]byte, BlockSize)
	b.SetBytes(BlockSize)
	for b.Loop() {
		c.Encrypt(buf, buf)
	}
}

func BenchmarkDecrypt(b *testing.B) {
	c, _ := NewCipher(make([]byte, 32))
	buf := make([]byte, BlockSize)
	b.SetBytes(BlockSize)
	for b.Loop() {
		c.Decrypt(buf, buf)
	}
}

func BenchmarkExpandKey(b *testing.B) {
	key := make([]byte, 32)
	for b.Loop() {
		c, _ := NewCipher(key)
		_ = c
	}
}
