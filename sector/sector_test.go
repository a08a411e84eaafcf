package sector

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
)

func TestParseSpec(t *testing.T) {
	for _, c := range []struct {
		in, capi, str string
		keys          int
	}{
		{"aes-xts-plain64", "xts(aes)", "aes-xts-plain64", 1},
		{"aes", "cbc(aes)", "aes-cbc-plain", 1},
		{"aes-plain", "cbc(aes)", "aes-cbc-plain", 1},
		{"aes-cbc-essiv:sha256", "essiv(cbc(aes),sha256)", "aes-cbc-essiv:sha256", 1},
		{"serpent-cbc-essiv:wp256", "essiv(cbc(serpent),wp256)", "serpent-cbc-essiv:wp256", 1},
		{"aes:64-cbc-lmk", "cbc(aes)", "aes:64-cbc-lmk", 64},
		{"aes-ecb", "ecb(aes)", "aes-ecb", 1},
		{"twofish-lrw-benbi", "lrw(twofish)", "twofish-lrw-benbi", 1},
		{"capi:xts(aes)-plain64", "xts(aes)", "capi:xts(aes)-plain64", 1},
		{"capi:cbc(aes)-essiv:sha256", "essiv(cbc(aes),sha256)", "capi:cbc(aes)-essiv:sha256", 1},
		{"capi:adiantum(xchacha12,aes)-plain64", "adiantum(xchacha12,aes)", "capi:adiantum(xchacha12,aes)-plain64", 1},
		{"xchacha12,aes-adiantum-plain64", "adiantum(xchacha12,aes)", "xchacha12,aes-adiantum-plain64", 1},
	} {
		s, err := ParseSpec(c.in)
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if s.CAPI != c.capi || s.String() != c.str || s.KeyCount != c.keys {
			t.Errorf("%s: got %s / %s / %d", c.in, s.CAPI, s, s.KeyCount)
		}
	}
	for _, c := range []struct{ in, part string }{
		{"", "empty"},
		{"aes-cbc", "IV mechanism required"},
		{"aes-xts-nosuch", `unknown IV mode "nosuch"`},
		{"aes-cbc-essiv", "needs an option"},
		{"aes-cbc-random", "integrity"},
		{"aes:3-cbc-plain", "key count"},
		{"aes:x-cbc-plain", "key count"},
		{"a(s-cbc-plain", "bad cipher name"},
		{"aes--plain", "bad chaining mode"},
		{"capi:", "missing crypto API name"},
		{"capi:xts(aes-plain64", "invalid algorithm name"},
		{"aes-cbc-plain64:x", "takes no option"},
		{strings.Repeat("a", 300), "longer than"},
	} {
		_, err := ParseSpec(c.in)
		if err == nil || !strings.Contains(err.Error(), c.part) {
			t.Errorf("ParseSpec(%q) = %v, want an error mentioning %q", c.in, err, c.part)
		}
	}
}

// TestBadInput: each bad parameter is refused with a clear error.
func TestBadInput(t *testing.T) {
	k64 := make([]byte, 64)
	for _, c := range []struct {
		spec string
		key  []byte
		o    Options
		want error
		part string
	}{
		{"aes-xts-plain64", k64, Options{SectorSize: 4096, IVOffset: 3}, ErrInvalidOptions, "not a multiple of 8"},
		{"aes-xts-plain64", k64, Options{SectorSize: 768}, ErrInvalidOptions, "768"},
		{"aes-cbc-random", k64[:32], Options{}, ErrUnsupported, "integrity"},
		{"aes-xts-plain64", k64[:24], Options{}, ErrInvalidKey, "256/384/512-bit key"},
		{"aes-cbc-essiv:sha256", k64[:20], Options{}, ErrInvalidKey, "128/192/256-bit"},
		{"aes:4-cbc-plain", k64[:20], Options{}, ErrInvalidKey, "512/768/1024-bit key"},
		{"nosuch-xts-plain64", k64, Options{}, ErrInvalidSpec, "nosuch"},
		{"aes-cbc-essiv:sha512", k64[:32], Options{}, ErrInvalidSpec, "sha512"},
		{"aes-cbc-benbi", k64[:32], Options{}, nil, ""},
	} {
		_, err := New(c.spec, c.key, c.o)
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: %v", c.spec, err)
			}
			continue
		}
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.part) {
			t.Errorf("New(%s, %d-byte key, %+v) = %v; want %v mentioning %q", c.spec, len(c.key), c.o, err, c.want, c.part)
		}
	}
	c, err := New("aes-xts-plain64", k64, Options{SectorSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8192)
	orig := bytes.Clone(buf)
	for _, r := range []struct {
		n     int
		first uint64
	}{{4095, 0}, {512, 0}, {4096, 1}, {4096, 4}} {
		if err := c.EncryptSectors(buf[:r.n], buf[:r.n], r.first); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%d bytes at sector %d: %v, want ErrInvalidRequest", r.n, r.first, err)
		}
	}
	if !bytes.Equal(buf, orig) {
		t.Fatal("a refused request changed the buffer")
	}
	// Partly overlapping buffers, on the by-value IV path (one aes-xts
	// sector), the other single-sector path (serpent) and batches.
	big := make([]byte, 3*4096)
	for _, spec := range []string{"aes-xts-plain64", "serpent-xts-plain64"} {
		c, err := New(spec, k64, Options{SectorSize: 4096})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{4096, 8192} {
			for _, shift := range []int{16, 4096 - 16} {
				orig := bytes.Clone(big)
				if err := c.EncryptSectors(big[shift:shift+n], big[:n], 0); !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), "overlap") {
					t.Errorf("%s: %d bytes, destination %d bytes ahead: %v", spec, n, shift, err)
				}
				if err := c.DecryptSectors(big[:n], big[shift:shift+n], 0); !errors.Is(err, ErrInvalidRequest) {
					t.Errorf("%s: decrypt %d bytes, source %d bytes ahead: %v", spec, n, shift, err)
				}
				if !bytes.Equal(big, orig) {
					t.Fatalf("%s: a refused overlapping request changed the buffer", spec)
				}
			}
		}
	}
}

// TestKeyCount checks dm-crypt's multi-key rule: sector s uses subkey
// s & (keycount-1), with s in 512-byte units, never shifted by large IVs.
func TestKeyCount(t *testing.T) {
	key := make([]byte, 4*16)
	rand.Read(key)
	for _, large := range []bool{false, true} {
		c, err := New("aes:4-cbc-plain64", key, Options{SectorSize: 1024, LargeIV: large})
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 8*1024)
		ct := make([]byte, len(buf))
		if err := c.EncryptSectors(ct, buf, 0); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 8; i++ {
			s := uint64(i * 2)              // 512-byte units
			k := key[(s&3)*16 : (s&3+1)*16] // subkey
			ivn := s
			if large {
				ivn = s / 2
			}
			one, err := New("aes-cbc-plain64", k, Options{SectorSize: 1024, LargeIV: large})
			if err != nil {
				t.Fatal(err)
			}
			want := make([]byte, 1024)
			_ = ivn
			if err := one.EncryptSectors(want, buf[:1024], s); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(ct[i*1024:(i+1)*1024], want) {
				t.Fatalf("large=%v sector %d: wrong subkey or IV", large, i)
			}
		}
	}
}

// TestEngineParallelMatchesInline forces the parallel path and compares it
// with the inline path, for every sector size.
func TestEngineParallelMatchesInline(t *testing.T) {
	key := make([]byte, 64)
	rand.Read(key)
	par := NewEngine(4)
	par.SetThreshold(1)
	inl := NewEngine(1)
	// The sizes cross the engine's smallest take (16 KiB) and, for CBC
	// encryption, its 16-sector groups; aes:4 has each sector's key depend
	// on where a take starts.
	for _, sp := range []struct {
		spec string
		key  []byte
	}{{"aes-xts-plain64", key}, {"aes-cbc-essiv:sha256", key[:32]}, {"aes:4-cbc-plain64", key}} {
		for _, ss := range []int{512, 1024, 2048, 4096} {
			a, err := New(sp.spec, sp.key, Options{SectorSize: ss, Engine: par})
			if err != nil {
				t.Fatal(err)
			}
			b, _ := New(sp.spec, sp.key, Options{SectorSize: ss, Engine: inl})
			for _, n := range []int{1, 2, 3, 7, 17, 64, 257, 1000, 4099} {
				src := make([]byte, n*ss)
				rand.Read(src)
				x, y := make([]byte, len(src)), make([]byte, len(src))
				first := uint64(ss / 512 * 3)
				if err := a.EncryptSectors(x, src, first); err != nil {
					t.Fatal(err)
				}
				if err := b.EncryptSectors(y, src, first); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(x, y) {
					t.Fatalf("%s, sector %d, %d sectors: parallel differs from inline", sp.spec, ss, n)
				}
				// The Inline methods on the parallel engine: the same bytes.
				z := make([]byte, len(src))
				if err := a.EncryptSectorsInline(z, src, first); err != nil || !bytes.Equal(z, y) {
					t.Fatalf("%s, sector %d, %d sectors: EncryptSectorsInline differs from inline (%v)", sp.spec, ss, n, err)
				}
				if err := a.DecryptSectorsInline(z, z, first); err != nil || !bytes.Equal(z, src) {
					t.Fatalf("%s, sector %d, %d sectors: DecryptSectorsInline does not invert (%v)", sp.spec, ss, n, err)
				}
				if err := a.DecryptSectors(x, x, first); err != nil || !bytes.Equal(x, src) {
					t.Fatalf("%s, sector %d, %d sectors: parallel decryption does not invert (%v)", sp.spec, ss, n, err)
				}
			}
		}
	}
	// Many callers share one engine: batches are recycled while late helpers
	// may still hold them, and each request must still come out whole.
	c, _ := New("aes-cbc-essiv:sha256", key[:32], Options{Engine: par})
	ref, _ := New("aes-cbc-essiv:sha256", key[:32], Options{Engine: inl})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := mrand.New(mrand.NewPCG(uint64(g), 7))
			for range 100 {
				n := 2 + r.IntN(300)
				src := make([]byte, n*512)
				for i := range src {
					src[i] = byte(r.Uint32())
				}
				first := uint64(r.IntN(1 << 20))
				x, y := make([]byte, len(src)), make([]byte, len(src))
				if err := c.EncryptSectors(x, src, first); err != nil {
					errs <- err
					return
				}
				ref.EncryptSectors(y, src, first)
				if !bytes.Equal(x, y) {
					errs <- fmt.Errorf("%d sectors at %d: parallel differs from inline", n, first)
					return
				}
				if err := c.DecryptSectors(x, x, first); err != nil || !bytes.Equal(x, src) {
					errs <- fmt.Errorf("%d sectors at %d: parallel decryption does not invert (%v)", n, first, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if th := NewEngine(1).Threshold(mustNew(t)); th != -1 {
		t.Errorf("a one-worker engine has threshold %d, want -1 (never parallel)", th)
	}
}

func mustNew(t *testing.T) *Cipher {
	c, err := New("aes-xts-plain64", make([]byte, 64), Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestZeroAllocs: the batch path allocates nothing per call, inline and
// parallel.
func TestZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race (sync.Pool drops items); the non-race run checks them")
	}
	for _, spec := range []string{"aes-xts-plain64", "aes-cbc-essiv:sha256", "aes-cbc-plain64", "serpent-xts-plain64"} {
		key := make([]byte, 64)
		if strings.Contains(spec, "cbc") {
			key = key[:32]
		}
		for _, th := range []int64{-1, 1} {
			e := NewEngine(2)
			e.SetThreshold(th)
			c, err := New(spec, key, Options{SectorSize: 4096, Engine: e})
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 64<<10)
			c.EncryptSectors(buf, buf, 0)
			if a := testing.AllocsPerRun(50, func() { c.EncryptSectors(buf, buf, 8) }); a != 0 {
				t.Errorf("%s threshold %d: %v allocs per batch", spec, th, a)
			}
			if a := testing.AllocsPerRun(50, func() { c.EncryptSectorsInline(buf, buf, 8); c.DecryptSectorsInline(buf, buf, 8) }); a != 0 {
				t.Errorf("%s threshold %d: %v allocs per inline batch", spec, th, a)
			}
			one := buf[:4096]
			if a := testing.AllocsPerRun(50, func() { c.EncryptSectors(one, one, 8); c.DecryptSectors(one, one, 8) }); a != 0 {
				t.Errorf("%s threshold %d: %v allocs per single sector", spec, th, a)
			}
		}
	}
}

func BenchmarkSectors(b *testing.B) {
	for _, spec := range []string{"aes-xts-plain64", "aes-cbc-essiv:sha256"} {
		for _, ss := range []int{512, 1024, 2048, 4096} {
			key := make([]byte, 64)
			if strings.Contains(spec, "cbc") {
				key = key[:32]
			}
			e := NewEngine(1) // one core: the per-core figure
			c, _ := New(spec, key, Options{SectorSize: ss, Engine: e})
			buf := make([]byte, 64<<10)
			b.Run(fmt.Sprintf("%s/%d/enc", spec, ss), func(b *testing.B) {
				b.SetBytes(int64(len(buf)))
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					c.EncryptSectors(buf, buf, 0)
				}
			})
			b.Run(fmt.Sprintf("%s/%d/dec", spec, ss), func(b *testing.B) {
				b.SetBytes(int64(len(buf)))
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					c.DecryptSectors(buf, buf, 0)
				}
			})
		}
	}
}

// BenchmarkOneSector is what one small random I/O pays: a single 512-byte
// sector through the whole sector path (bench/report sets it against
// openssl speed at 512 bytes).
func BenchmarkOneSector(b *testing.B) {
	for _, spec := range []string{"aes-xts-plain64", "aes-cbc-essiv:sha256"} {
		key := make([]byte, 64)
		if strings.Contains(spec, "cbc") {
			key = key[:32]
		}
		c, _ := New(spec, key, Options{SectorSize: 512, Engine: NewEngine(1)})
		buf := make([]byte, 512)
		for _, dir := range []string{"enc", "dec"} {
			b.Run(spec+"/"+dir, func(b *testing.B) {
				b.SetBytes(512)
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					if dir == "enc" {
						c.EncryptSectors(buf, buf, uint64(i))
					} else {
						c.DecryptSectors(buf, buf, uint64(i))
					}
				}
			})
		}
	}
}

// BenchmarkScaling measures 1 MiB batches on 1 worker and on every core;
// the ratio is the parallel scaling.
func BenchmarkScaling(b *testing.B) {
	for _, spec := range []string{"aes-xts-plain64", "aes-cbc-essiv:sha256", "serpent-xts-plain64"} {
		for _, w := range []int{1, runtime.GOMAXPROCS(0)} {
			key := make([]byte, 64)
			if strings.Contains(spec, "cbc") {
				key = key[:32]
			}
			e := NewEngine(w)
			e.SetThreshold(1)
			c, _ := New(spec, key, Options{SectorSize: 4096, Engine: e})
			buf := make([]byte, 1<<20)
			b.Run(fmt.Sprintf("%s/workers=%d", spec, w), func(b *testing.B) {
				b.SetBytes(int64(len(buf)))
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					c.EncryptSectors(buf, buf, 0)
				}
			})
		}
	}
}

// BenchmarkBreakEven reports the measured inline/parallel break-even.
func BenchmarkBreakEven(b *testing.B) {
	for _, spec := range []string{"aes-xts-plain64", "aes-cbc-essiv:sha256", "serpent-xts-plain64"} {
		key := make([]byte, 64)
		if strings.Contains(spec, "cbc") {
			key = key[:32]
		}
		b.Run(spec, func(b *testing.B) {
			e := NewEngine(runtime.GOMAXPROCS(0))
			c, _ := New(spec, key, Options{SectorSize: 512, Engine: e})
			var th int64
			for i := 0; i < b.N; i++ {
				th = e.Measure(c)
			}
			b.ReportMetric(float64(th), "break-even-bytes")
		})
	}
}

// TestCAPILMKMatchesLegacy: "capi:cbc(aes)-lmk" takes 64 keys, like
// "aes:64-cbc-lmk" (dm-crypt's crypt_ctr_cipher_new).
func TestCAPILMKMatchesLegacy(t *testing.T) {
	key := make([]byte, 64*16)
	rand.Read(key)
	a, err := New("capi:cbc(aes)-lmk", key, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New("aes:64-cbc-lmk", key, Options{})
	if err != nil {
		t.Fatal(err)
	}
	src := make([]byte, 8*512)
	rand.Read(src)
	x, y := make([]byte, len(src)), make([]byte, len(src))
	a.EncryptSectors(x, src, 100)
	b.EncryptSectors(y, src, 100)
	if !bytes.Equal(x, y) {
		t.Fatal("capi: lmk differs from the legacy form")
	}
}
