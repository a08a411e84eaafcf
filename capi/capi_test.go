package capi

import (
	"bytes"
	"crypto/cipher"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/internal/testmgr"
)

// supported lists every algorithm name with vectors that blkcrypt
// implements. Names with vectors but no implementation are listed in
// unsupported, so that a vector file gaining a name is noticed.
var supported = []string{
	"aes", "serpent", "twofish",
	"ecb(aes)", "cbc(aes)", "xts(aes)", "lrw(aes)", "essiv(cbc(aes),sha256)",
	"ecb(serpent)", "cbc(serpent)", "xts(serpent)", "lrw(serpent)",
	"ecb(twofish)", "cbc(twofish)", "xts(twofish)", "lrw(twofish)",
	"camellia", "ecb(camellia)", "cbc(camellia)", "xts(camellia)",
	"adiantum(xchacha12,aes)", "adiantum(xchacha20,aes)",
	"cast5", "ecb(cast5)", "cbc(cast5)", "ctr(cast5)",
	"des", "ecb(des)", "cbc(des)", "ctr(des)",
	"des3_ede", "ecb(des3_ede)", "cbc(des3_ede)", "ctr(des3_ede)",
	"sha1", "sha256", "sha512", "ripemd160", "wp512", "blake2b-512", "blake2s-256",
	"streebog256", "streebog512",
}

var unsupported = map[string]string{
	"crc32":     "not a crypto API hash blkcrypt needs",
	"ecb(aria)": "aria: no driver", "cbc(aria)": "aria: no driver", "xts(aria)": "aria: no driver",
	"ecb(sm4)": "sm4: no driver", "cbc(sm4)": "sm4: no driver", "xts(sm4)": "sm4: no driver",
}

// TestEveryDriverPassesVectors instantiates every driver of every name with
// vectors and requires each to pass the kernel testmgr, cryptsetup and IEEE
// 1619 vectors (the self-test runs them all, including the batch path).
func TestEveryDriverPassesVectors(t *testing.T) {
	for _, name := range testmgr.Names() {
		if why, ok := unsupported[name]; ok {
			t.Logf("%s: not tested: %s", name, why)
			continue
		}
		found := false
		for _, s := range supported {
			found = found || s == name
		}
		if !found {
			t.Errorf("vectors for %s, which is neither supported nor listed as unsupported", name)
			continue
		}
	}
	for _, name := range supported {
		ds, err := Drivers(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, d := range ds {
			if err := d.SelfTest(); err != nil {
				t.Errorf("%s: %v", d.Driver, err)
			}
			if st := d.SelfTestState(); !strings.HasPrefix(st, "passed (") || strings.Contains(st, "no vectors") {
				t.Errorf("%s: state %q, want known answers run", d.Driver, st)
			}
		}
		if len(ds) == 0 {
			t.Errorf("%s: no drivers", name)
		}
	}
}

// TestNISTXTS runs the 1400 byte-aligned NIST CAVP XTSGenAES records (200
// of them with ciphertext stealing) through every xts(aes) driver.
func TestNISTXTS(t *testing.T) {
	raw, err := os.ReadFile("testdata/nist_cavp_xts_aes_dataunitseqno.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Vectors []struct{ ID, Key, Tweak, Plaintext, Ciphertext string } `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Vectors) != 1400 {
		t.Fatalf("%d vectors, want 1400", len(f.Vectors))
	}
	ds, err := Drivers("xts(aes)")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		for _, v := range f.Vectors {
			key, _ := hex.DecodeString(v.Key)
			iv, _ := hex.DecodeString(v.Tweak)
			pt, _ := hex.DecodeString(v.Plaintext)
			ct, _ := hex.DecodeString(v.Ciphertext)
			tf, err := d.Skcipher(key)
			if err != nil {
				t.Fatalf("%s %s: %v", d.Driver, v.ID, err)
			}
			out := make([]byte, len(pt))
			tf.Encrypt(out, pt, iv)
			if !bytes.Equal(out, ct) {
				t.Fatalf("%s %s: encrypt mismatch", d.Driver, v.ID)
			}
			tf.Decrypt(out, out, iv)
			if !bytes.Equal(out, pt) {
				t.Fatalf("%s %s: decrypt mismatch", d.Driver, v.ID)
			}
		}
	}
}

// TestBadNamesAndKeys: malformed names, wrong argument kinds, digests that
// are not cipher keys and bad key sizes give errors, never panics.
func TestBadNamesAndKeys(t *testing.T) {
	for _, c := range []struct {
		name string
		want error
	}{
		{"essiv(cbc(aes),sha512)", ErrInvalidName}, // 64-byte digest is no AES key
		{"essiv(cbc(aes),sha1)", ErrInvalidName},   // 20 bytes
		{"essiv(cbc(aes),ripemd160)", ErrInvalidName},
		{"cbc(nosuch)", ErrNotFound},
		{"nosuch(aes)", ErrNotFound},
		{"nosuch", ErrNotFound},
		{"cbc(aes", ErrInvalidName},
		{"cbc(aes))", ErrInvalidName},
		{"cbc()", ErrInvalidName},
		{"", ErrInvalidName},
		{"cbc(aes,aes)", ErrInvalidName},
		{"cbc(sha256)", ErrInvalidName},
		{"essiv(aes,sha256)", ErrInvalidName},
		{"essiv(cbc(aes),aes)", ErrInvalidName},
		{"xts(adiantum(xchacha12,aes))", ErrInvalidName},
		{"cbc(cbc(cbc(cbc(cbc(cbc(cbc(cbc(cbc(cbc(aes))))))))))", ErrInvalidName},
		{strings.Repeat("a", 200), ErrInvalidName},
		{"cbc(a es)", ErrInvalidName},
	} {
		_, err := Lookup(c.name)
		if !errors.Is(err, c.want) {
			t.Errorf("Lookup(%q) = %v, want %v", c.name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("Lookup(%q): multi-line error %q", c.name, err)
		}
	}
	for _, c := range []struct {
		name string
		key  int
	}{{"xts(aes)", 24}, {"xts(aes)", 16}, {"cbc(aes)", 20}, {"cbc(aes)", 0}, {"essiv(cbc(aes),sha256)", 64}, {"lrw(aes)", 16}, {"adiantum(xchacha12,aes)", 16}} {
		_, err := NewSkcipher(c.name, make([]byte, c.key))
		if !errors.Is(err, ErrInvalidKeySize) {
			t.Errorf("NewSkcipher(%s, %d-byte key) = %v, want ErrInvalidKeySize", c.name, c.key, err)
		}
	}
	tf, err := NewSkcipher("cbc(aes)", make([]byte, 16))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	for _, c := range []struct {
		n, iv int
	}{{15, 16}, {17, 16}, {16, 15}, {16, 0}} {
		if err := tf.Encrypt(buf[:c.n], buf[:c.n], buf[:c.iv]); !errors.Is(err, ErrInvalidLength) {
			t.Errorf("cbc %d bytes, %d-byte IV: %v, want ErrInvalidLength", c.n, c.iv, err)
		}
	}
	if err := tf.Encrypt(buf[1:33], buf[:32], buf[:16]); !errors.Is(err, ErrInvalidLength) {
		t.Errorf("partial overlap accepted: %v", err)
	}
	xt, _ := NewSkcipher("xts(aes)", make([]byte, 32))
	if err := xt.Encrypt(buf[:15], buf[:15], buf[:16]); !errors.Is(err, ErrInvalidLength) {
		t.Errorf("xts 15 bytes: %v", err)
	}
	if err := xt.EncryptSectors(buf[:48], buf[:48], 32, buf[:32]); !errors.Is(err, ErrInvalidLength) {
		t.Errorf("48 bytes as 32-byte sectors: %v", err)
	}
}

// brokenBlock is AES with one flipped bit: a driver that must fail its
// self-test and never be chosen.
type brokenBlock struct{ cipher.Block }

func (b brokenBlock) Encrypt(dst, src []byte) { b.Block.Encrypt(dst, src); dst[0] ^= 1 }

type brokenCBC struct{ Skcipher }

func (b brokenCBC) Encrypt(dst, src, iv []byte) {
	b.Skcipher.Encrypt(dst, src, iv)
	dst[len(dst)-1] ^= 0x80
}

func TestSelfTestDisablesBadDriver(t *testing.T) {
	good, err := Lookup("aes")
	if err != nil {
		t.Fatal(err)
	}
	bad := &Alg{Name: "aes", Driver: "aes-broken", Priority: 100000, Type: TypeCipher, BlockSize: 16, KeySizes: aesKeySizes,
		NewCipher: func(k []byte) (cipher.Block, error) {
			b, err := good.NewCipher(k)
			return brokenBlock{b}, err
		}}
	badCBC := &Alg{Name: "cbc(aes)", Driver: "cbc-aes-broken", Priority: 100000, Type: TypeSkcipher, BlockSize: 16, IVSize: 16, KeySizes: aesKeySizes,
		NewSkcipher: func(k []byte) (Skcipher, error) {
			b, _ := good.NewCipher(k)
			return brokenCBC{cbcMode{b}}, nil
		}}
	if err := Register(bad); err != nil {
		t.Fatal(err)
	}
	if err := Register(badCBC); err != nil {
		t.Fatal(err)
	}
	defer Unregister("aes-broken")
	defer Unregister("cbc-aes-broken")

	a, err := Lookup("aes")
	if err != nil || a.Driver == "aes-broken" {
		t.Fatalf("Lookup(aes) = %v, %v; the broken driver must not be chosen", a.Driver, err)
	}
	if st := bad.SelfTestState(); !strings.HasPrefix(st, "failed: ") || !strings.Contains(st, "mismatch") {
		t.Fatalf("broken driver state %q, want failed with a reason", st)
	}
	c, err := Lookup("cbc(aes)")
	if err != nil || c.Driver == "cbc-aes-broken" {
		t.Fatalf("Lookup(cbc(aes)) = %v, %v", c.Driver, err)
	}
	if !errors.Is(badCBC.SelfTest(), ErrSelfTest) {
		t.Fatalf("broken cbc driver passed its self-test")
	}
	ds, _ := Drivers("cbc(aes)")
	for _, d := range ds {
		if strings.Contains(d.Driver, "aes-broken") && d != badCBC {
			t.Errorf("template instantiated over the broken cipher: %s", d.Driver)
		}
	}
	if _, err := LookupDriver("cbc(aes)", "cbc-aes-broken"); !errors.Is(err, ErrSelfTest) {
		t.Errorf("LookupDriver of the broken driver: %v", err)
	}
	found := false
	for _, l := range List() {
		if l.Driver == "cbc-aes-broken" && strings.HasPrefix(l.SelfTestState(), "failed") {
			found = true
		}
	}
	if !found {
		t.Errorf("List does not show the failed driver")
	}
}

// TestSpeedTableFormat checks the tcrypt line format and the rows: every
// key size times every block size the algorithm takes.
func TestSpeedTableFormat(t *testing.T) {
	for _, c := range []struct {
		name string
		keys []string
		rows int
	}{
		{"xts(aes)", []string{"256", "384", "512"}, 21},
		{"essiv(cbc(aes),sha256)", []string{"128", "192", "256"}, 21},
		{"adiantum(xchacha12,aes)", []string{"256"}, 7},
	} {
		a, err := Lookup(c.name)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if _, err := Speed(&buf, a, time.Millisecond, false); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		hdr := regexp.MustCompile(`^testing speed of (\S+) \((\S+)\) encryption$`)
		if m := hdr.FindStringSubmatch(lines[0]); m == nil || m[1] != c.name || m[2] != a.Driver {
			t.Fatalf("header %q", lines[0])
		}
		row := regexp.MustCompile(`^test (\d+) \((\d+) bit key, (\d+) byte blocks\): (\d+) ops/s \((\d+) bytes\)$`)
		if len(lines)-1 != c.rows {
			t.Fatalf("%s: %d rows, want %d", c.name, len(lines)-1, c.rows)
		}
		for i, l := range lines[1:] {
			m := row.FindStringSubmatch(l)
			if m == nil {
				t.Fatalf("row %q does not parse", l)
			}
			if m[1] != strconv.Itoa(i) {
				t.Errorf("row %d numbered %s", i, m[1])
			}
			if m[2] != c.keys[i/7] || m[3] != strconv.Itoa(SpeedBlockSizes[i%7]) {
				t.Errorf("row %q: want %s-bit key, %d-byte blocks", l, c.keys[i/7], SpeedBlockSizes[i%7])
			}
			if m[4] == "0" {
				t.Errorf("row %q: no operations", l)
			}
		}
	}
}
