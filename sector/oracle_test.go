package sector

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/oracle"
)

// oracleIV builds the dm-crypt IV for IV sector number n in the test's own
// plain terms (the layouts from cryptsetup's documentation), with essiv's
// encryption done by OpenSSL.
func oracleIV(t *testing.T, o *oracle.Oracle, mode string, key []byte, n uint64) []byte {
	iv := make([]byte, 16)
	switch mode {
	case "plain":
		binary.LittleEndian.PutUint32(iv, uint32(n))
	case "plain64", "essiv:sha256":
		binary.LittleEndian.PutUint64(iv, n)
	case "plain64be":
		binary.BigEndian.PutUint64(iv[8:], n)
	case "null":
	default:
		t.Fatalf("no oracle IV for %s", mode)
	}
	if mode == "essiv:sha256" {
		salt := sha256.Sum256(key)
		e, err := o.Crypt("aes-256-ecb", salt[:], nil, iv, true)
		if err != nil {
			t.Fatal(err)
		}
		iv = e
	}
	return iv
}

// TestOpenSSLOracle encrypts random batches with the sector layer and
// checks every sector against OpenSSL (aes-*-xts / aes-*-cbc through
// libcrypto), at random sector numbers, sector sizes, IV offsets, with and
// without large IVs.
func TestOpenSSLOracle(t *testing.T) {
	o := oracle.New(t)
	r := mrand.New(mrand.NewPCG(1, 2))
	modes := []string{"plain", "plain64", "plain64be", "essiv:sha256", "null"}
	cases := 0
	for i := 0; i < 300; i++ {
		chain := []string{"xts", "cbc"}[r.IntN(2)]
		mode := modes[r.IntN(len(modes))]
		if chain == "xts" && mode == "essiv:sha256" {
			mode = "plain64"
		}
		var ks int
		var ossl string
		if chain == "xts" {
			ks = []int{32, 64}[r.IntN(2)]
			ossl = fmt.Sprintf("aes-%d-xts", ks*4)
		} else {
			ks = []int{16, 24, 32}[r.IntN(3)]
			ossl = fmt.Sprintf("aes-%d-cbc", ks*8)
		}
		ss := []int{512, 1024, 2048, 4096}[r.IntN(4)]
		unit := uint64(ss / 512)
		large := r.IntN(2) == 0
		ivOff := uint64(r.Int64N(1<<40)) / unit * unit
		if r.IntN(4) == 0 {
			ivOff = (1<<32 - 8) / unit * unit // across the 32-bit boundary for plain
		}
		first := uint64(r.Int64N(1<<30)) / unit * unit
		n := 1 + r.IntN(6)
		key := make([]byte, ks)
		rand.Read(key)
		spec := "aes-" + chain + "-" + mode
		c := checkOracle(t, spec, key, Options{SectorSize: ss, IVOffset: ivOff, LargeIV: large}, first, n,
			func(s uint64, pt []byte) []byte {
				want, err := o.Crypt(ossl, key, oracleIV(t, o, mode, key, s), pt, true)
				if err != nil {
					t.Fatal(err)
				}
				return want
			})
		// internal/aes drivers (not template instances such as the purego
		// build's xts(aes-stdlib)) take the by-value IV path.
		aesDriver := !strings.Contains(c.Driver(), "(")
		if fast := c.p64 != nil; fast != (aesDriver && (mode == "plain" || mode == "plain64" || mode == "essiv:sha256")) {
			t.Fatalf("%s (%s): by-value IV path %v", spec, c.Driver(), fast)
		}
		cases += n
	}
	t.Logf("%d sectors matched OpenSSL", cases)
}

// checkOracle encrypts n random sectors at first with spec, as one batch and
// each sector alone (the single-sector paths), and checks every sector
// against want(IV sector number, plaintext sector); both directions.
func checkOracle(t *testing.T, spec string, key []byte, opts Options, first uint64, n int, want func(s uint64, pt []byte) []byte) *Cipher {
	t.Helper()
	c, err := New(spec, key, opts)
	if err != nil {
		t.Fatalf("%s: %v", spec, err)
	}
	ss := opts.SectorSize
	unit := uint64(ss / 512)
	pt := make([]byte, n*ss)
	rand.Read(pt)
	ct := make([]byte, len(pt))
	if err := c.EncryptSectors(ct, pt, first); err != nil {
		t.Fatal(err)
	}
	for j := 0; j < n; j++ {
		at := first + uint64(j)*unit
		s := opts.IVOffset + at
		if opts.LargeIV {
			s /= unit
		}
		p := pt[j*ss : (j+1)*ss]
		w := want(s, p)
		where := fmt.Sprintf("%s key %d sector size %d large %v iv_offset %d sector %d", spec, len(key)*8, ss, opts.LargeIV, opts.IVOffset, at)
		if !bytes.Equal(ct[j*ss:(j+1)*ss], w) {
			t.Fatalf("%s: differs from OpenSSL", where)
		}
		one := make([]byte, ss)
		if err := c.EncryptSectors(one, p, at); err != nil || !bytes.Equal(one, w) {
			t.Fatalf("%s alone: differs from OpenSSL (%v)", where, err)
		}
		if err := c.DecryptSectors(one, one, at); err != nil || !bytes.Equal(one, p) {
			t.Fatalf("%s alone: decryption does not invert (%v)", where, err)
		}
	}
	back := make([]byte, len(ct))
	if err := c.DecryptSectors(back, ct, first); err != nil || !bytes.Equal(back, pt) {
		t.Fatalf("%s: decryption does not invert (%v)", spec, err)
	}
	return c
}
