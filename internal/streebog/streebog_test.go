package streebog

import (
	"bytes"
	"crypto/hmac"
	"crypto/pbkdf2"
	"encoding"
	"encoding/hex"
	"encoding/json"
	"hash"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/gost"
)

type vectorFile struct {
	Source           map[string]string `json:"source"`
	HashVectorCount  int               `json:"hash_vector_count"`
	HashVectors      []hashVector      `json:"hash_vectors"`
	HMACVectorCount  int               `json:"hmac_vector_count"`
	HMACVectors      []hmacVector      `json:"hmac_vectors"`
	PBKDF2Count      int               `json:"pbkdf2_vector_count"`
	PBKDF2Vectors    []pbkdf2Vector    `json:"pbkdf2_vectors"`
	SyntheticCount   int               `json:"synthetic_vector_count"`
	SyntheticVectors []hashVector      `json:"synthetic_vectors"`
	PrefixCount      int               `json:"prefix_vector_count"`
	PrefixVectors    []hashVector      `json:"prefix_vectors"`
}

type hashVector struct {
	ID           string `json:"id"`
	Algorithm    string `json:"algorithm"`
	Source       string `json:"source"`
	InputHex     string `json:"input_hex"`
	DigestHex    string `json:"digest_hex"`
	DigestPrefix string `json:"digest_prefix_hex"`
}

type hmacVector struct {
	ID        string `json:"id"`
	Algorithm string `json:"algorithm"`
	KeyHex    string `json:"key_hex"`
	InputHex  string `json:"input_hex"`
	MACHex    string `json:"mac_hex"`
}

type pbkdf2Vector struct {
	ID          string `json:"id"`
	PRF         string `json:"prf"`
	PasswordHex string `json:"password_hex"`
	SaltHex     string `json:"salt_hex"`
	Iterations  int    `json:"iterations"`
	OutputHex   string `json:"output_hex"`
}

func loadVectors(t *testing.T) *vectorFile {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f vectorFile
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		n, listed int
	}{
		{"hash", f.HashVectorCount, len(f.HashVectors)},
		{"hmac", f.HMACVectorCount, len(f.HMACVectors)},
		{"pbkdf2", f.PBKDF2Count, len(f.PBKDF2Vectors)},
		{"synthetic", f.SyntheticCount, len(f.SyntheticVectors)},
		{"prefix", f.PrefixCount, len(f.PrefixVectors)},
	} {
		if c.listed == 0 || c.listed != c.n {
			t.Fatalf("%s: %d vectors, count says %d", c.name, c.listed, c.n)
		}
	}
	if len(f.Source) == 0 {
		t.Fatal("vectors.json has no source")
	}
	return &f
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func constructor(t *testing.T, alg string) func() hash.Hash {
	t.Helper()
	switch alg {
	case "streebog256", "hmac(streebog256)":
		return New256
	case "streebog512", "hmac(streebog512)":
		return New512
	}
	t.Fatalf("unknown algorithm %q", alg)
	return nil
}

// sumOf hashes data with the one-shot helper of the right size.
func sumOf(size int, data []byte) []byte {
	if size == Size256 {
		s := Sum256(data)
		return s[:]
	}
	s := Sum512(data)
	return s[:]
}

func TestHashVectors(t *testing.T) {
	f := loadVectors(t)
	seen := map[string]int{}
	for _, v := range f.HashVectors {
		in, want := unhex(t, v.InputHex), unhex(t, v.DigestHex)
		h := constructor(t, v.Algorithm)()
		if h.Size() != len(want) || h.BlockSize() != BlockSize {
			t.Fatalf("%s: Size %d BlockSize %d, digest has %d bytes", v.ID, h.Size(), h.BlockSize(), len(want))
		}
		h.Write(in)
		if got := h.Sum(nil); !bytes.Equal(got, want) {
			t.Errorf("%s: got %x, want %x", v.ID, got, want)
		}
		h.Reset()
		for i := range in {
			h.Write(in[i : i+1])
		}
		if got := h.Sum(nil); !bytes.Equal(got, want) {
			t.Errorf("%s (bytewise): got %x, want %x", v.ID, got, want)
		}
		if got := sumOf(len(want), in); !bytes.Equal(got, want) {
			t.Errorf("%s (Sum%d): got %x, want %x", v.ID, 8*len(want), got, want)
		}
		seen[v.Algorithm]++
	}
	if seen["streebog256"] == 0 || seen["streebog512"] == 0 {
		t.Errorf("vectors per algorithm: %v", seen)
	}
}

// TestPrefixVectors checks digests known only in part (cryptsetup's plain
// mode truncates the hash to the key size).
func TestPrefixVectors(t *testing.T) {
	for _, v := range loadVectors(t).PrefixVectors {
		in, want := unhex(t, v.InputHex), unhex(t, v.DigestPrefix)
		h := constructor(t, v.Algorithm)()
		h.Write(in)
		if got := h.Sum(nil); !bytes.HasPrefix(got, want) {
			t.Errorf("%s: got %x, want prefix %x", v.ID, got, want)
		}
	}
}

func TestHMACVectors(t *testing.T) {
	for _, v := range loadVectors(t).HMACVectors {
		m := hmac.New(constructor(t, v.Algorithm), unhex(t, v.KeyHex))
		m.Write(unhex(t, v.InputHex))
		if got, want := m.Sum(nil), unhex(t, v.MACHex); !bytes.Equal(got, want) {
			t.Errorf("%s: got %x, want %x", v.ID, got, want)
		}
		// A second message after Reset goes through the saved keyed
		// states (MarshalBinary), not a fresh key schedule.
		m.Reset()
		m.Write(unhex(t, v.InputHex))
		if got, want := m.Sum(nil), unhex(t, v.MACHex); !bytes.Equal(got, want) {
			t.Errorf("%s (after Reset): got %x, want %x", v.ID, got, want)
		}
	}
}

func TestPBKDF2Vectors(t *testing.T) {
	for _, v := range loadVectors(t).PBKDF2Vectors {
		want := unhex(t, v.OutputHex)
		got, err := pbkdf2.Key(constructor(t, v.PRF), string(unhex(t, v.PasswordHex)), unhex(t, v.SaltHex), v.Iterations, len(want))
		if err != nil {
			t.Fatalf("%s: %v", v.ID, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: got %x, want %x", v.ID, got, want)
		}
	}
}

// TestSyntheticVectors runs gost-engine's synthetic test: 512 messages of
// every length from 0 to 255 bytes, cut from both ends of a fixed buffer.
func TestSyntheticVectors(t *testing.T) {
	var buf [256]byte
	for i := range buf {
		buf[i] = byte(i)
	}
	for _, v := range loadVectors(t).SyntheticVectors {
		newHash := constructor(t, v.Algorithm)
		outer := newHash()
		h := newHash()
		for n := 0; n < len(buf); n++ {
			h.Reset()
			h.Write(buf[len(buf)-n:])
			outer.Write(h.Sum(nil))
		}
		for n := 0; n < len(buf); n++ {
			h.Reset()
			h.Write(buf[:n])
			outer.Write(h.Sum(nil))
		}
		if got, want := outer.Sum(nil), unhex(t, v.DigestHex); !bytes.Equal(got, want) {
			t.Errorf("%s: got %x, want %x", v.ID, got, want)
		}
	}
}

func TestPiAndTau(t *testing.T) {
	var seen [256]bool
	for _, v := range gost.Pi {
		if seen[v] {
			t.Fatal("pi is not a permutation")
		}
		seen[v] = true
	}
	// lpsXor assumes P is the transpose of the 8x8 byte matrix.
	for i := 0; i < 8; i++ {
		for k := 0; k < 8; k++ {
			if int(tau[8*i+k]) != 8*k+i {
				t.Fatalf("tau(%d) = %d, want %d", 8*i+k, tau[8*i+k], 8*k+i)
			}
		}
	}
}

// stateBytes and stateWords convert between state words and the 64 bytes
// a_0..a_63 of RFC 6986 section 7.
func stateBytes(w *[8]uint64) (b [64]byte) {
	for i, v := range w {
		for k := 0; k < 8; k++ {
			b[8*i+k] = byte(v >> (8 * k))
		}
	}
	return b
}

func stateWords(b *[64]byte) (w [8]uint64) {
	for i := range w {
		for k := 7; k >= 0; k-- {
			w[i] = w[i]<<8 | uint64(b[8*i+k])
		}
	}
	return w
}

// refS, refP and refL are RFC 6986 section 7 written out byte by byte, to
// check the table-driven lps against.
func refS(w [8]uint64) [8]uint64 {
	b := stateBytes(&w)
	for i := range b {
		b[i] = gost.Pi[b[i]]
	}
	return stateWords(&b)
}

func refP(w [8]uint64) [8]uint64 {
	b := stateBytes(&w)
	var o [64]byte
	for i := range o {
		o[i] = b[tau[i]]
	}
	return stateWords(&o)
}

func refL(w [8]uint64) [8]uint64 {
	for i := range w {
		w[i] = linear(w[i])
	}
	return w
}

func rfcWords(t *testing.T, s string) [8]uint64 {
	t.Helper()
	b := unhex(t, s)
	if len(b) != 64 {
		t.Fatalf("%d bytes", len(b))
	}
	return wordsFromRFC(b)
}

// TestRFCIntermediates follows the first iteration of RFC 6986 example
// 10.1.1 (M1, 512-bit) through S, P and L.
func TestRFCIntermediates(t *testing.T) {
	var zero, k [8]uint64
	lpsXor(&k, &zero, &zero)
	if want := rfcWords(t, "b383fc2eced4a574b383fc2eced4a574b383fc2eced4a574b383fc2eced4a574"+
		"b383fc2eced4a574b383fc2eced4a574b383fc2eced4a574b383fc2eced4a574"); k != want {
		t.Fatalf("LPS(0) = %x", k)
	}
	m := rfcWords(t, "01323130393837363534333231303938373635343332313039383736353433323130393837363534333231303938373635343332313039383736353433323130")
	var x [8]uint64
	for i := range x {
		x[i] = k[i] ^ m[i]
	}
	steps := []struct {
		name string
		got  [8]uint64
		want string
	}{
		{"X[K1](m)", x, "b2b1cd1ef7ec924286b7cf1cffe49c4c84b5c91afde694448abbcb18fbe0964682b3c516f9e2904080b1cd1ef7ec924286b7cf1cffe49c4c84b5c91afde69444"},
		{"SX[K1](m)", refS(x), "4645d95fc0beec2c432f8914b62d4efd3e5e37f14b097aead67de417c220b0482492ac996667e0ebdf45d95fc0beec2c432f8914b62d4efd3e5e37f14b097aea"},
		{"PSX[K1](m)", refP(refS(x)), "46433ed624df433e452f5e7d92452f5ed98937e4acd989375f14f117995f14f1c0b64bc266c0b64bbe2d092067be2d09ec4e7ab0e0ec4e7a2cfdea48eb2cfdea"},
		{"LPSX[K1](m)", refL(refP(refS(x))), "e60059d4d8e0758024c73f6f3183653f56579189602ae4c21e7953ebc0e212a0ce78a8df475c2fd4fc43fc4b71c01e35be465fb20dad2cf690cdf65028121bb9"},
	}
	var fast [8]uint64
	lpsXor(&fast, &k, &m)
	steps = append(steps, struct {
		name string
		got  [8]uint64
		want string
	}{"lpsXor(K1, m)", fast, steps[3].want})
	for i := range x {
		x[i] = k[i] ^ c[0][i]
	}
	steps = append(steps, struct {
		name string
		got  [8]uint64
		want string
	}{"K[1] xor C[1]", x, "028ba7f4d01e7f9d5848d3af0eb1d96b9ce98a6de0917562c2cd44a3bb516188f8ff1cbf5cb3cc7511c1d6266ab47661b6f5881802a0e8576e0399773c72e073"})
	for _, s := range steps {
		if want := rfcWords(t, s.want); s.got != want {
			t.Errorf("%s = %x, want %s", s.name, s.got, s.want)
		}
	}
}

// TestLPSMatchesReference compares the tables with the definitions on
// random states.
func TestLPSMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for n := 0; n < 1000; n++ {
		var x, y, in, got [8]uint64
		for i := range in {
			x[i], y[i] = rng.Uint64(), rng.Uint64()
			in[i] = x[i] ^ y[i]
		}
		lpsXor(&got, &x, &y)
		want := refL(refP(refS(in)))
		if got != want {
			t.Fatalf("LPS(%x) = %x, want %x", in, got, want)
		}
		if lpsXor(&x, &x, &y); x != want {
			t.Fatal("lpsXor with out = x differs")
		}
	}
}

func TestAdd512Carry(t *testing.T) {
	x := [8]uint64{^uint64(0), ^uint64(0), 5}
	addSmall(&x, 1)
	if x != [8]uint64{0, 0, 6} {
		t.Errorf("addSmall: %x", x)
	}
	x = [8]uint64{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}
	y := [8]uint64{2}
	add512(&x, &y)
	if x != [8]uint64{1} {
		t.Errorf("add512 does not wrap mod 2^512: %x", x)
	}
}

// TestSplitWrites hashes random data in random pieces, compares with one
// Write, and checks that Sum and Clone leave the running state untouched.
func TestSplitWrites(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for _, size := range []int{Size256, Size512} {
		newHash := New512
		if size == Size256 {
			newHash = New256
		}
		for n := 0; n < 400; n++ {
			data := make([]byte, n)
			rng.Read(data)
			want := sumOf(size, data)
			h := newHash()
			for p := data; len(p) > 0; {
				k := rng.Intn(len(p)) + 1
				h.Write(p[:k])
				p = p[k:]
				h.Sum(nil) // must not disturb the state
			}
			if got := h.Sum([]byte("prefix")); string(got[:6]) != "prefix" || !bytes.Equal(got[6:], want) {
				t.Fatalf("size %d length %d: split writes differ", size, n)
			}
			c, err := h.(hash.Cloner).Clone()
			if err != nil {
				t.Fatal(err)
			}
			c.Write([]byte{1})
			if got := h.Sum(nil); !bytes.Equal(got, want) {
				t.Fatalf("size %d length %d: clone shares state", size, n)
			}
		}
	}
}

func TestResetAndSumKeepState(t *testing.T) {
	data := bytes.Repeat([]byte("streebog"), 40) // 320 bytes: whole blocks and a tail
	for _, newHash := range []func() hash.Hash{New256, New512} {
		fresh := newHash()
		empty := fresh.Sum(nil)

		h := newHash()
		h.Write(data[:100])
		mid1 := h.Sum(nil)
		mid2 := h.Sum(nil)
		if !bytes.Equal(mid1, mid2) {
			t.Fatal("two Sums in a row differ")
		}
		h.Write(data[100:])
		if got, want := h.Sum(nil), sumOf(h.Size(), data); !bytes.Equal(got, want) {
			t.Fatal("Sum in the middle changed the running state")
		}
		h.Reset()
		if got := h.Sum(nil); !bytes.Equal(got, empty) {
			t.Fatalf("after Reset: %x, want the empty digest %x", got, empty)
		}
		h.Write(data[:100])
		if got := h.Sum(nil); !bytes.Equal(got, mid1) {
			t.Fatal("Reset did not restore the initial state")
		}
	}
}

func TestMarshalBinary(t *testing.T) {
	data := bytes.Repeat([]byte{0xa5, 0x5a, 0xff}, 100)
	for _, newHash := range []func() hash.Hash{New256, New512} {
		for _, cut := range []int{0, 1, 63, 64, 65, 200, len(data)} {
			h := newHash()
			h.Write(data[:cut])
			st, err := h.(encoding.BinaryMarshaler).MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			h2 := newHash()
			h2.Write([]byte("something else"))
			if err := h2.(encoding.BinaryUnmarshaler).UnmarshalBinary(st); err != nil {
				t.Fatal(err)
			}
			h2.Write(data[cut:])
			if got, want := h2.Sum(nil), sumOf(h.Size(), data); !bytes.Equal(got, want) {
				t.Fatalf("size %d cut %d: restored state gives a different digest", h.Size(), cut)
			}
		}
	}
	st, _ := New256().(encoding.BinaryMarshaler).MarshalBinary()
	if err := New512().(encoding.BinaryUnmarshaler).UnmarshalBinary(st); err == nil {
		t.Error("a streebog256 state was accepted by streebog512")
	}
	st, _ = New512().(encoding.BinaryMarshaler).MarshalBinary()
	if err := New512().(encoding.BinaryUnmarshaler).UnmarshalBinary(st[:len(st)-1]); err == nil {
		t.Error("a short state was accepted")
	}
	st[len(st)-1] = BlockSize
	if err := New512().(encoding.BinaryUnmarshaler).UnmarshalBinary(st); err == nil {
		t.Error("a state with a full buffer was accepted")
	}
}

// FuzzStreebog checks that any split of the input into writes, with the
// state marshalled and restored between some of them, gives the one-shot
// digest. The RFC messages are in testdata/fuzz/FuzzStreebog.
func FuzzStreebog(f *testing.F) {
	f.Add([]byte(""), uint16(0))
	f.Add(bytes.Repeat([]byte{0xff}, 130), uint16(64))
	f.Fuzz(func(t *testing.T, data []byte, seed uint16) {
		for _, newHash := range []func() hash.Hash{New256, New512} {
			want := sumOf(newHash().Size(), data)
			h := newHash()
			// Chunk sizes from the seed, so the fuzzer explores the splits too.
			s := uint32(seed) | 1
			for p := data; len(p) > 0; {
				s = s*1103515245 + 12345
				k := int(s>>16)%(2*BlockSize+1) + 1
				k = min(k, len(p))
				h.Write(p[:k])
				p = p[k:]
				if s&0x100 != 0 {
					st, err := h.(encoding.BinaryMarshaler).MarshalBinary()
					if err != nil {
						t.Fatal(err)
					}
					h = newHash()
					if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(st); err != nil {
						t.Fatal(err)
					}
				}
			}
			if got := h.Sum(nil); !bytes.Equal(got, want) {
				t.Fatalf("size %d: chunked %x, one write %x", h.Size(), got, want)
			}
		}
	})
}

func benchmarkSize(b *testing.B, newHash func() hash.Hash, n int) {
	buf := make([]byte, n)
	h := newHash()
	sum := make([]byte, 0, Size512)
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		h.Reset()
		h.Write(buf)
		sum = h.Sum(sum[:0])
	}
}

func BenchmarkStreebog512(b *testing.B) {
	for _, n := range []int{64, 1024, 4096, 65536} {
		b.Run(sizeName(n), func(b *testing.B) { benchmarkSize(b, New512, n) })
	}
}

func BenchmarkStreebog256(b *testing.B) {
	b.Run("4K", func(b *testing.B) { benchmarkSize(b, New256, 4096) })
}

// BenchmarkPBKDF2Streebog512 measures one VeraCrypt-sized derivation unit:
// 1000 iterations for 64 bytes of key material.
func BenchmarkPBKDF2Streebog512(b *testing.B) {
	salt := make([]byte, 64)
	for b.Loop() {
		if _, err := pbkdf2.Key(New512, "password", salt, 1000, 64); err != nil {
			b.Fatal(err)
		}
	}
}

func sizeName(n int) string {
	if n >= 1024 {
		return strconv.Itoa(n/1024) + "K"
	}
	return strconv.Itoa(n)
}
