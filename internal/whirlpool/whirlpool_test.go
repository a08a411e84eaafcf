package whirlpool

import (
	"bytes"
	"crypto/pbkdf2"
	"encoding/hex"
	"encoding/json"
	"hash"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

type hashVector struct {
	ID        string `json:"id"`
	Algorithm string `json:"algorithm"`
	InputHex  string `json:"input_hex"`
	DigestHex string `json:"digest_hex"`
}

func readJSON(t *testing.T, name string, v any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func loadHashVectors(t *testing.T, name string) []hashVector {
	var f struct {
		VectorCount int          `json:"vector_count"`
		Vectors     []hashVector `json:"vectors"`
	}
	readJSON(t, name, &f)
	if len(f.Vectors) == 0 || len(f.Vectors) != f.VectorCount {
		t.Fatalf("%s: %d vectors, vector_count %d", name, len(f.Vectors), f.VectorCount)
	}
	return f.Vectors
}

func constructor(t *testing.T, alg string) func() hash.Hash {
	switch alg {
	case "whirlpool", "wp512":
		return New
	case "wp384":
		return New384
	case "wp256":
		return New256
	}
	t.Fatalf("unknown algorithm %q", alg)
	return nil
}

func checkVector(t *testing.T, v hashVector) {
	in := unhex(t, v.InputHex)
	want := unhex(t, v.DigestHex)
	newHash := constructor(t, v.Algorithm)

	h := newHash()
	if h.Size() != len(want) {
		t.Fatalf("%s: Size() %d, digest has %d bytes", v.ID, h.Size(), len(want))
	}
	h.Write(in)
	if got := h.Sum(nil); !bytes.Equal(got, want) {
		t.Errorf("%s: got %x, want %x", v.ID, got, want)
	}
	// Byte-at-a-time writes give the same digest.
	h.Reset()
	for i := range in {
		h.Write(in[i : i+1])
	}
	if got := h.Sum(nil); !bytes.Equal(got, want) {
		t.Errorf("%s (bytewise): got %x, want %x", v.ID, got, want)
	}
	if len(want) == Size {
		if got := Sum512(in); !bytes.Equal(got[:], want) {
			t.Errorf("%s (Sum512): got %x, want %x", v.ID, got, want)
		}
	}
}

func TestKernelVectors(t *testing.T) {
	seen := map[string]int{}
	for _, v := range loadHashVectors(t, "kernel_wp.json") {
		checkVector(t, v)
		seen[v.Algorithm]++
	}
	for _, a := range []string{"wp512", "wp384", "wp256"} {
		if seen[a] == 0 {
			t.Errorf("no %s vectors", a)
		}
	}
}

func TestCryptsetupVectors(t *testing.T) {
	for _, v := range loadHashVectors(t, "cryptsetup_hash_whirlpool.json") {
		checkVector(t, v)
	}
}

func TestPBKDF2Whirlpool(t *testing.T) {
	var f struct {
		VectorCount int `json:"vector_count"`
		Vectors     []struct {
			ID           string `json:"id"`
			KDF          string `json:"kdf"`
			Hash         string `json:"hash"`
			Iterations   int    `json:"iterations"`
			PasswordHex  string `json:"password_hex"`
			SaltHex      string `json:"salt_hex"`
			OutputLength int    `json:"output_length"`
			OutputHex    string `json:"output_hex"`
		} `json:"vectors"`
	}
	readJSON(t, "cryptsetup_kdf_whirlpool.json", &f)
	if len(f.Vectors) == 0 || len(f.Vectors) != f.VectorCount {
		t.Fatalf("%d vectors, vector_count %d", len(f.Vectors), f.VectorCount)
	}
	for _, v := range f.Vectors {
		if v.KDF != "pbkdf2" || v.Hash != "whirlpool" {
			t.Fatalf("%s: unexpected %s/%s", v.ID, v.KDF, v.Hash)
		}
		got, err := pbkdf2.Key(New, string(unhex(t, v.PasswordHex)), unhex(t, v.SaltHex), v.Iterations, v.OutputLength)
		if err != nil {
			t.Fatalf("%s: %v", v.ID, err)
		}
		if want := unhex(t, v.OutputHex); !bytes.Equal(got, want) {
			t.Errorf("%s: got %x, want %x", v.ID, got, want)
		}
	}
}

// TestSboxAndConstants checks the generated S-box against values printed in
// the specification (its first row, which is also the first round
// constant) and checks that it is a permutation.
func TestSboxAndConstants(t *testing.T) {
	first := []byte{0x18, 0x23, 0xc6, 0xe8, 0x87, 0xb8, 0x01, 0x4f, 0x36, 0xa6, 0xd2, 0xf5, 0x79, 0x6f, 0x91, 0x52}
	if !bytes.Equal(sbox[:16], first) {
		t.Errorf("S-box row 0 = %x, want %x", sbox[:16], first)
	}
	if rc[0] != 0x1823c6e887b8014f {
		t.Errorf("rc[1] = %#x", rc[0])
	}
	var seen [256]bool
	for _, v := range sbox {
		if seen[v] {
			t.Fatal("S-box is not a permutation")
		}
		seen[v] = true
	}
}

// TestSplitWrites hashes random data in random pieces, compares with one
// Write, and checks that Sum leaves the running state untouched.
func TestSplitWrites(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for n := 0; n < 300; n++ {
		data := make([]byte, n)
		rng.Read(data)
		want := Sum512(data)
		h := New()
		for p := data; len(p) > 0; {
			k := rng.Intn(len(p)) + 1
			h.Write(p[:k])
			p = p[k:]
			h.Sum(nil) // must not disturb the state
		}
		if got := h.Sum([]byte("prefix")); !bytes.Equal(got[6:], want[:]) || string(got[:6]) != "prefix" {
			t.Fatalf("length %d: split writes differ", n)
		}
		c, err := h.(hash.Cloner).Clone()
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte{1})
		if got := h.Sum(nil); !bytes.Equal(got, want[:]) {
			t.Fatalf("length %d: clone shares state", n)
		}
		h384 := New384()
		h384.Write(data)
		h256 := New256()
		h256.Write(data)
		if !bytes.Equal(h384.Sum(nil), want[:48]) || !bytes.Equal(h256.Sum(nil), want[:32]) {
			t.Fatalf("length %d: truncated variants differ", n)
		}
	}
}

func TestSizes(t *testing.T) {
	for _, c := range []struct {
		h    hash.Hash
		size int
	}{{New(), 64}, {New384(), 48}, {New256(), 32}} {
		if c.h.Size() != c.size || c.h.BlockSize() != 64 || len(c.h.Sum(nil)) != c.size {
			t.Errorf("Size %d BlockSize %d, want %d/64", c.h.Size(), c.h.BlockSize(), c.size)
		}
	}
}

// TestOpenSSL compares with `openssl dgst -whirlpool` on random inputs.
func TestOpenSSL(t *testing.T) {
	path := testenv.Need(t, "openssl", "openssl")
	run := func(data []byte) (string, error) {
		var lastErr error
		for _, args := range [][]string{
			{"dgst", "-whirlpool", "-binary"},
			{"dgst", "-whirlpool", "-binary", "-provider", "legacy", "-provider", "default"},
		} {
			cmd := exec.Command(path, args...)
			cmd.Stdin = bytes.NewReader(data)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Run(); err != nil {
				lastErr = err
				if errb.Len() > 0 {
					lastErr = &opensslError{strings.TrimSpace(errb.String())}
				}
				continue
			}
			if out.Len() != Size {
				lastErr = &opensslError{"unexpected output length"}
				continue
			}
			return hex.EncodeToString(out.Bytes()), nil
		}
		return "", lastErr
	}
	if _, err := run([]byte("abc")); err != nil {
		testenv.Missing(t, "openssl cannot compute whirlpool, not even with its legacy provider (%v)", err)
	}
	rng := rand.New(rand.NewSource(2))
	sizes := []int{0, 1, 31, 32, 33, 63, 64, 65, 95, 96, 127, 128, 1000, 4096 + 17}
	for i := 0; i < 10; i++ {
		sizes = append(sizes, rng.Intn(3000))
	}
	for _, n := range sizes {
		data := make([]byte, n)
		rng.Read(data)
		want, err := run(data)
		if err != nil {
			t.Fatalf("openssl on %d bytes: %v", n, err)
		}
		got := Sum512(data)
		if hex.EncodeToString(got[:]) != want {
			t.Errorf("%d bytes: got %x, openssl %s", n, got, want)
		}
	}
}

type opensslError struct{ msg string }

func (e *opensslError) Error() string { return e.msg }

func TestNoAllocs(t *testing.T) {
	h := New()
	buf := make([]byte, 1000)
	sum := make([]byte, 0, Size)
	n := testing.AllocsPerRun(50, func() {
		h.Reset()
		h.Write(buf)
		sum = h.Sum(sum[:0])
	})
	if n != 0 {
		t.Errorf("%v allocations per hash", n)
	}
}

func BenchmarkWrite8K(b *testing.B) {
	h := New()
	buf := make([]byte, 8192)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		h.Write(buf)
	}
}

func BenchmarkSum512_64(b *testing.B) {
	buf := make([]byte, 64)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		Sum512(buf)
	}
}
