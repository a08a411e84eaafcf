package sector

import (
	"bytes"
	"crypto/cipher"
	"crypto/des"
	"crypto/rand"
	"encoding/binary"
	"errors"
	mrand "math/rand/v2"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/oracle"
)

// Ciphers with 64-bit blocks have 8-byte IVs: dm-crypt's IV generators fill
// cc->iv_size bytes (at least 8, the sector number), so plain64 is the whole
// IV and plain64be and benbi put their number in the same 8 bytes.

func TestLegacy64Specs(t *testing.T) {
	for _, c := range []struct{ in, capi, str string }{
		{"cast5-cbc-tcw", "cbc(cast5)", "cast5-cbc-tcw"},
		{"capi:cbc(cast5)-tcw", "cbc(cast5)", "capi:cbc(cast5)-tcw"},
		{"des3_ede-cbc-tcw", "cbc(des3_ede)", "des3_ede-cbc-tcw"},
		{"des3_ede-cbc-plain64", "cbc(des3_ede)", "des3_ede-cbc-plain64"},
		{"des-cbc-essiv:sha256", "essiv(cbc(des),sha256)", "des-cbc-essiv:sha256"},
	} {
		s, err := ParseSpec(c.in)
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if s.CAPI != c.capi || s.String() != c.str {
			t.Errorf("%s: got %s / %s", c.in, s.CAPI, s)
		}
	}
	for _, c := range []struct {
		spec string
		key  int
	}{{"cast5-cbc-tcw", 16 + 8 + 16}, {"des3_ede-cbc-tcw", 24 + 8 + 16}, {"des-cbc-plain64", 8}, {"cast5-ecb", 16}, {"des3_ede-ctr-plain64", 24}} {
		sc, err := New(c.spec, make([]byte, c.key), Options{})
		if err != nil {
			t.Errorf("%s with a %d-byte key: %v", c.spec, c.key, err)
			continue
		}
		if c.spec != "cast5-ecb" && sc.ivSize != 8 {
			t.Errorf("%s: %d-byte IV, want 8", c.spec, sc.ivSize)
		}
	}
	// xts and lrw need 16-byte blocks; essiv:sha256 is no DES key.
	for _, spec := range []string{"des3_ede-xts-plain64", "cast5-lrw-benbi", "des-cbc-essiv:sha256"} {
		if _, err := New(spec, make([]byte, 48), Options{}); err == nil {
			t.Errorf("%s accepted", spec)
		}
	}
}

// oracleIV64 is the 8-byte dm-crypt IV of IV sector n, in the test's own
// terms.
func oracleIV64(t *testing.T, mode string, n uint64) []byte {
	iv := make([]byte, 8)
	switch mode {
	case "plain":
		binary.LittleEndian.PutUint32(iv, uint32(n))
	case "plain64":
		binary.LittleEndian.PutUint64(iv, n)
	case "plain64be":
		binary.BigEndian.PutUint64(iv, n)
	case "benbi": // 1-based count of 8-byte blocks: 64 per 512 bytes
		binary.BigEndian.PutUint64(iv, n<<6+1)
	case "null":
	default:
		t.Fatalf("no IV for %s", mode)
	}
	return iv
}

// TestLegacy64OpenSSL checks des3_ede-cbc with every IV mode that needs no
// digest against OpenSSL's des-ede3-cbc, at random sectors, sector sizes,
// IV offsets, with and without large IVs, in batches and one sector alone.
func TestLegacy64OpenSSL(t *testing.T) {
	o := oracle.New(t)
	r := mrand.New(mrand.NewPCG(3, 4))
	cases := 0
	for i := 0; i < 60; i++ {
		mode := []string{"plain", "plain64", "plain64be", "benbi", "null"}[i%5]
		ss := []int{512, 1024, 4096}[r.IntN(3)]
		unit := uint64(ss / 512)
		large := r.IntN(2) == 0
		ivOff := uint64(r.Int64N(1<<40)) / unit * unit
		first := uint64(r.Int64N(1<<30)) / unit * unit
		n := 1 + r.IntN(4)
		key := make([]byte, 24)
		rand.Read(key)
		spec := "des3_ede-cbc-" + mode
		checkOracle(t, spec, key, Options{SectorSize: ss, IVOffset: ivOff, LargeIV: large}, first, n,
			func(s uint64, pt []byte) []byte {
				want, err := o.Crypt("des-ede3-cbc", key, oracleIV64(t, mode, s), pt, true)
				if err != nil {
					t.Fatal(err)
				}
				return want
			})
		cases += n
	}
	t.Logf("%d sectors matched OpenSSL", cases)
}

// TestTCW64 decrypts des3_ede-cbc-tcw sectors by dm-crypt's definition,
// written out here: key = 3DES key || 8-byte IV seed || 16 whitening bytes;
// IV = seed XOR little-endian sector; whitening from the bitwise crc32_le of
// each 32-bit quarter of (whitening XOR sector, twice), folded to 8 bytes
// and XORed over the ciphertext before CBC decryption.
func TestTCW64(t *testing.T) {
	key := make([]byte, 24+8+16)
	rand.Read(key)
	const ivOff = 77
	c, err := New("des3_ede-cbc-tcw", key, Options{IVOffset: ivOff})
	if err != nil {
		t.Fatal(err)
	}
	b, err := des.NewTripleDESCipher(key[:24])
	if err != nil {
		t.Fatal(err)
	}
	seed, wh := key[24:32], key[32:48]
	const sectors = 5
	ct := make([]byte, sectors*512)
	rand.Read(ct)
	pt := make([]byte, len(ct))
	if err := c.DecryptSectors(pt, ct, 0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < sectors; i++ {
		n := uint64(ivOff + i)
		var sec [8]byte
		binary.LittleEndian.PutUint64(sec[:], n)
		var buf [16]byte
		for j := range buf {
			buf[j] = wh[j] ^ sec[j%8]
		}
		var q [4]uint32
		for j := range q {
			q[j] = crc32LEBitwise(0, buf[4*j:4*j+4])
		}
		var w [8]byte
		binary.LittleEndian.PutUint32(w[0:], q[0]^q[3])
		binary.LittleEndian.PutUint32(w[4:], q[1]^q[2])
		d := bytes.Clone(ct[i*512 : (i+1)*512])
		for j := range d {
			d[j] ^= w[j%8]
		}
		iv := make([]byte, 8)
		for j := range iv {
			iv[j] = seed[j] ^ sec[j]
		}
		cipher.NewCBCDecrypter(b, iv).CryptBlocks(d, d)
		if !bytes.Equal(pt[i*512:(i+1)*512], d) {
			t.Fatalf("sector %d differs from dm-crypt's tcw with an 8-byte IV", i)
		}
	}
	again := make([]byte, len(pt))
	if err := c.EncryptSectors(again, pt, 0); err != nil || !bytes.Equal(again, ct) {
		t.Fatalf("re-encryption does not give back the sectors (%v)", err)
	}
	// The data key is the first 24 bytes; a key one byte short is refused.
	if got := c.tfms[0].KeySize(); got != 24 {
		t.Fatalf("data key is %d bytes, want 24", got)
	}
	if _, err := New("des3_ede-cbc-tcw", key[:len(key)-1], Options{}); !errors.Is(err, ErrInvalidKey) {
		t.Fatalf("a 47-byte des3_ede-cbc-tcw key: %v, want ErrInvalidKey", err)
	}
}
