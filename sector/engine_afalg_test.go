//go:build linux

package sector

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
)

// The AF_ALG engine's tests need the kernel's AF_ALG, which the development
// host lacks: there they report it absent and skip. test/kernel runs this
// package's test binary inside a qemu guest with BLKCRYPT_REQUIRE_AFALG=1,
// where absence is a failure.

const envRequireAFALG = "BLKCRYPT_REQUIRE_AFALG"

func needAFALG(t testing.TB) {
	t.Helper()
	if err := AFALGAvailable(); err != nil {
		if os.Getenv(envRequireAFALG) == "1" {
			t.Fatalf("%v (and %s=1)", err, envRequireAFALG)
		}
		t.Skipf("AF_ALG absent on this kernel (%v); test/kernel runs these tests in a guest", err)
	}
}

// TestAFALGAvailability reports whether this kernel has AF_ALG, and checks
// that NewAFALGCipher says so with ErrNoAFALG when it has not.
func TestAFALGAvailability(t *testing.T) {
	err := AFALGAvailable()
	if err != nil {
		if !errors.Is(err, ErrNoAFALG) {
			t.Fatalf("AFALGAvailable: %v does not wrap ErrNoAFALG", err)
		}
		_, nerr := NewAFALGCipher("aes-xts-plain64", make([]byte, 64), Options{}, AFALGOptions{})
		if !errors.Is(nerr, ErrNoAFALG) {
			t.Fatalf("NewAFALGCipher without AF_ALG: %v, want ErrNoAFALG", nerr)
		}
	}
	needAFALG(t)
	a, err := NewAFALGCipher("aes-xts-plain64", testKey(64), Options{}, AFALGOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	t.Logf("AF_ALG present: %s, %d operation sockets", a.Name(), a.Sockets())
}

func testKey(n int) []byte {
	k := make([]byte, n)
	for i := range k {
		k[i] = byte(i*29 + 11)
	}
	return k
}

// afalgSpecs are the specs the conformance tests run through the kernel,
// with their key sizes.
var afalgSpecs = []struct {
	spec string
	key  int
}{
	{"aes-xts-plain64", 32},
	{"aes-xts-plain64", 64},
	{"aes-cbc-essiv:sha256", 32},
	{"aes-cbc-essiv:sha256", 16},
	{"aes-cbc-plain", 16},
	{"aes-cbc-plain64", 24},
	{"aes-cbc-plain64be", 32},
	{"aes-cbc-benbi", 32},
	{"aes-cbc-null", 16},
	{"aes-cbc-eboiv", 32},
	{"aes-ecb", 16},
	{"aes-ctr-plain64", 32},
	{"aes-lrw-benbi", 48},
	{"serpent-xts-plain64", 64},
	{"twofish-cbc-essiv:sha256", 32},
	{"capi:xts(aes)-plain64", 64},
	{"capi:adiantum(xchacha12,aes)-plain64", 32},
}

// TestAFALGSectorIVVectors runs the engine, forced to offload every batch,
// through cryptsetup's sector-IV vectors: the suite every in-process
// driver passes (TestCryptsetupSectorIV).
func TestAFALGSectorIVVectors(t *testing.T) {
	needAFALG(t)
	raw, err := os.ReadFile("testdata/cryptsetup_sector_iv.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Vectors []struct {
			ID         string `json:"id"`
			Spec       string `json:"cipher_spec"`
			Key        string `json:"key_hex"`
			Start      uint64 `json:"start_sector_512"`
			DataLength int    `json:"data_length"`
			Results    []struct {
				SectorSize int    `json:"sector_size"`
				LargeIV    bool   `json:"large_iv"`
				SHA256     string `json:"ciphertext_sha256"`
			} `json:"results"`
		} `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, v := range f.Vectors {
		key, _ := hex.DecodeString(v.Key)
		for _, r := range v.Results {
			for _, viaOffset := range []bool{true, false} {
				opts := Options{SectorSize: r.SectorSize, LargeIV: r.LargeIV}
				first := v.Start
				if viaOffset {
					opts.IVOffset, first = v.Start, 0
				}
				a, err := NewAFALGCipher(v.Spec, key, opts, AFALGOptions{Threshold: 1, Sockets: 3})
				if err != nil {
					t.Fatalf("%s: %v", v.ID, err)
				}
				off0, _ := a.Stats() // the constructor's probe
				buf := make([]byte, v.DataLength)
				if err := a.EncryptSectors(buf, buf, first); err != nil {
					t.Fatalf("%s: %v", v.ID, err)
				}
				sum := sha256.Sum256(buf)
				if got := hex.EncodeToString(sum[:]); got != r.SHA256 {
					t.Errorf("%s (%s) sector %d large %v offset %v: got %s want %s", v.ID, a.Name(), r.SectorSize, r.LargeIV, viaOffset, got, r.SHA256)
				}
				if err := a.DecryptSectors(buf, buf, first); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(buf, make([]byte, len(buf))) {
					t.Fatalf("%s: decryption did not restore zeros", v.ID)
				}
				if off, in := a.Stats(); off-off0 != 2*int64(len(buf)) || in != 0 {
					t.Fatalf("%s: %d bytes offloaded, %d in-process; want everything offloaded", v.ID, off-off0, in)
				}
				a.Close()
				n++
			}
		}
	}
	if n != 98 {
		t.Fatalf("ran %d cases, want 98 (49 results × 2 ways)", n)
	}
}

// TestAFALGMatchesInProcess compares the kernel with the in-process
// drivers over specs, sector sizes, batch sizes, sector positions, IV
// offsets and large IVs, both ways, in place and not.
func TestAFALGMatchesInProcess(t *testing.T) {
	needAFALG(t)
	r := rand.New(rand.NewPCG(4, 5))
	ran := 0
	// Two geometries per spec (the emulated guest is slow): 512-byte
	// sectors, and 4096 or 1024 with and without large IVs in turn.
	for si, s := range afalgSpecs {
		for _, g := range []struct {
			ss    int
			large bool
		}{{512, false}, {[]int{4096, 1024}[si%2], si%4 < 2}} {
			ss, large := g.ss, g.large
			key := make([]byte, s.key)
			for i := range key {
				key[i] = byte(r.Uint32())
			}
			opts := Options{SectorSize: ss, LargeIV: large, IVOffset: uint64(r.IntN(1000)) * uint64(ss/512)}
			a, err := NewAFALGCipher(s.spec, key, opts, AFALGOptions{Threshold: 1, Sockets: 1 + r.IntN(4)})
			if errors.Is(err, ErrUnsupported) {
				t.Logf("%s: %v", s.spec, err)
				continue
			}
			if err != nil {
				t.Fatalf("%s: %v", s.spec, err)
			}
			c, err := New(s.spec, key, opts)
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range []int{1, 3, 33} {
				src := make([]byte, n*ss)
				for i := range src {
					src[i] = byte(r.Uint32())
				}
				first := uint64(r.IntN(1<<20)) * uint64(ss/512)
				want := make([]byte, len(src))
				if err := c.EncryptSectors(want, src, first); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, len(src))
				if err := a.EncryptSectors(got, src, first); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("%s (%s) sector %d large %v, %d sectors at %d: kernel and in-process differ", s.spec, a.Name(), ss, large, n, first)
				}
				if err := a.DecryptSectors(got, got, first); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, src) {
					t.Fatalf("%s (%s) sector %d: in-place kernel decryption does not restore the data", s.spec, a.Name(), ss)
				}
				ran++
			}
			a.Close()
			c.Wipe()
		}
	}
	if ran == 0 {
		t.Fatal("the kernel supported none of the specs")
	}
	t.Logf("%d batches identical", ran)
}

// TestAFALGFallback: batches below the threshold run in-process, batches
// at or above it in the kernel, with the same results.
func TestAFALGFallback(t *testing.T) {
	needAFALG(t)
	a, err := NewAFALGCipher("aes-xts-plain64", testKey(64), Options{SectorSize: 4096}, AFALGOptions{Threshold: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	c, _ := New("aes-xts-plain64", testKey(64), Options{SectorSize: 4096})
	for _, n := range []int{4 << 10, 8 << 10, 16 << 10, 64 << 10} {
		off0, in0 := a.Stats()
		src := bytes.Repeat([]byte{byte(n)}, n)
		got, want := make([]byte, n), make([]byte, n)
		if err := a.EncryptSectors(got, src, 8); err != nil {
			t.Fatal(err)
		}
		c.EncryptSectors(want, src, 8)
		if !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: wrong result", n)
		}
		off1, in1 := a.Stats()
		if kernel := off1 > off0; kernel != (n >= 16<<10) || (in1 > in0) == kernel {
			t.Fatalf("%d bytes with a 16 KiB threshold: offloaded %d, in-process %d", n, off1-off0, in1-in0)
		}
	}
	a.SetThreshold(-1)
	off0, _ := a.Stats()
	a.EncryptSectors(make([]byte, 1<<20), make([]byte, 1<<20), 0)
	if off1, _ := a.Stats(); off1 != off0 {
		t.Fatal("threshold -1 still offloads")
	}
}

// TestAFALGConcurrent shares one cipher (and its socket pool) between
// goroutines.
func TestAFALGConcurrent(t *testing.T) {
	needAFALG(t)
	key := testKey(32)
	a, err := NewAFALGCipher("aes-cbc-essiv:sha256", key, Options{}, AFALGOptions{Threshold: 1, Sockets: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	c, _ := New("aes-cbc-essiv:sha256", key, Options{})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 9))
			for i := 0; i < 20; i++ {
				n := (1 + r.IntN(40)) * 512
				src := make([]byte, n)
				for j := range src {
					src[j] = byte(r.Uint32())
				}
				first := uint64(r.IntN(1 << 30))
				got, want := make([]byte, n), make([]byte, n)
				if err := a.EncryptSectors(got, src, first); err != nil {
					errs <- err
					return
				}
				c.EncryptSectors(want, src, first)
				if !bytes.Equal(got, want) {
					errs <- fmt.Errorf("goroutine %d batch %d: wrong result", g, i)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestAFALGRejects: modes AF_ALG cannot take are refused with
// ErrUnsupported, and bad requests like Cipher's.
func TestAFALGRejects(t *testing.T) {
	needAFALG(t)
	for _, s := range []struct {
		spec string
		key  int
	}{{"aes-cbc-lmk", 32}, {"aes-cbc-tcw", 64}, {"aes:4-cbc-plain64", 128}} {
		_, err := NewAFALGCipher(s.spec, testKey(s.key), Options{}, AFALGOptions{})
		if err == nil {
			t.Errorf("%s: accepted", s.spec)
		} else if !errors.Is(err, ErrUnsupported) && !errors.Is(err, ErrInvalidSpec) && !errors.Is(err, ErrInvalidKey) {
			t.Errorf("%s: %v", s.spec, err)
		}
	}
	a, err := NewAFALGCipher("aes-xts-plain64", testKey(64), Options{SectorSize: 4096}, AFALGOptions{Threshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.EncryptSectors(make([]byte, 4096), make([]byte, 4096), 1); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("unaligned first sector: %v", err)
	}
	if err := a.EncryptSectors(make([]byte, 4096), make([]byte, 512), 0); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("partial sector: %v", err)
	}
	a.Close()
	if err := a.OffloadSectors(make([]byte, 4096), make([]byte, 4096), 0, true); err == nil {
		t.Error("a closed cipher still works")
	}
}

// TestAFALGBreakEven measures the break-even size and checks that it
// agrees with the timings it was taken from.
func TestAFALGBreakEven(t *testing.T) {
	needAFALG(t)
	for _, spec := range []string{"aes-xts-plain64", "aes-cbc-essiv:sha256"} {
		for _, ss := range []int{512, 4096} {
			key := testKey(64)
			if spec != "aes-xts-plain64" {
				key = key[:32]
			}
			a, err := NewAFALGCipher(spec, key, Options{SectorSize: ss}, AFALGOptions{})
			if err != nil {
				t.Fatal(err)
			}
			th, pts := a.Measure()
			for _, p := range pts {
				t.Logf("%s sector %d, %7d bytes: in-process %v, kernel %v (%s)", spec, ss, p.Bytes, p.InProcess, p.Kernel, a.Name())
			}
			if th > 0 && int64(pts[len(pts)-1].Bytes) != th {
				t.Errorf("threshold %d is not the last size measured", th)
			}
			t.Logf("%s sector %d: break-even %d (-1: never offload)", spec, ss, th)
			a.Close()
		}
	}
}

// BenchmarkAFALG compares the kernel through AF_ALG with the in-process
// drivers at 512, 4096 and 65536 bytes (4096-byte sectors above 512).
func BenchmarkAFALG(b *testing.B) {
	needAFALG(b)
	for _, spec := range []string{"aes-xts-plain64", "aes-cbc-essiv:sha256"} {
		key := testKey(64)
		if spec != "aes-xts-plain64" {
			key = key[:32]
		}
		for _, size := range []int{512, 4096, 65536} {
			ss := min(size, 4096)
			a, err := NewAFALGCipher(spec, key, Options{SectorSize: ss}, AFALGOptions{Threshold: 1})
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, size)
			b.Run(fmt.Sprintf("%s/%d/afalg", spec, size), func(b *testing.B) {
				b.SetBytes(int64(size))
				for i := 0; i < b.N; i++ {
					if err := a.OffloadSectors(buf, buf, 0, true); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(fmt.Sprintf("%s/%d/inprocess", spec, size), func(b *testing.B) {
				b.SetBytes(int64(size))
				c := a.Cipher()
				for i := 0; i < b.N; i++ {
					if err := c.EncryptSectors(buf, buf, 0); err != nil {
						b.Fatal(err)
					}
				}
			})
			a.Close()
		}
	}
}
