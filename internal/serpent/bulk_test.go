package serpent

import (
	"bytes"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

func mustImpl(t testing.TB, impl string, key []byte) *Cipher {
	t.Helper()
	c, err := NewImpl(impl, key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestImpls(t *testing.T) {
	impls := Impls()
	if impls[len(impls)-1] != "generic" {
		t.Fatalf("Impls() = %v, want generic last", impls)
	}
	for _, impl := range impls {
		if got := mustImpl(t, impl, nil).Impl(); got != impl {
			t.Errorf("NewImpl(%q).Impl() = %q", impl, got)
		}
	}
	if _, err := NewImpl("avx2", nil); (err == nil) != hasAVX2 {
		t.Errorf("NewImpl(avx2) error %v with hasAVX2 %v", err, hasAVX2)
	}
	if _, err := NewImpl("nope", nil); err == nil {
		t.Error("unknown implementation accepted")
	}
	if _, err := NewImpl("generic", make([]byte, 33)); err == nil {
		t.Error("33-byte key accepted")
	}
}

// TestImplVectors runs the kernel and cryptsetup vectors through every
// implementation's bulk methods (the other tests use single blocks).
func TestImplVectors(t *testing.T) {
	var vs []decoded
	vs = append(vs, loadVectors(t, "kernel_ecb_serpent.json", "ecb")...)
	vs = append(vs, loadVectors(t, "kernel_other_ciphers_serpent.json", "")...)
	vs = append(vs, loadVectors(t, "cryptsetup_block_ciphers_serpent.json", "")...)
	for _, impl := range Impls() {
		ran := map[string]int{}
		for _, v := range vs {
			got := make([]byte, len(v.pt))
			back := make([]byte, len(v.pt))
			switch v.mode {
			case "ecb":
				c := mustImpl(t, impl, v.key)
				c.EncryptBlocks(got, v.pt)
				c.DecryptBlocks(back, v.c)
			case "cbc":
				c := mustImpl(t, impl, v.key)
				iv := [16]byte(v.iv)
				c.EncryptCBC(got, v.pt, &iv)
				c.DecryptCBC(back, v.c, &iv)
				sg := make([]byte, len(v.pt))
				c.EncryptCBCSectors(sg, v.pt, len(v.pt), bytes.Clone(v.iv))
				if !bytes.Equal(sg, v.c) {
					t.Errorf("%s %s: EncryptCBCSectors differs", impl, v.id)
				}
			case "xts":
				h := len(v.key) / 2
				x := NewXTS(mustImpl(t, impl, v.key[:h]), mustImpl(t, impl, v.key[h:]))
				iv := [16]byte(v.iv)
				x.Encrypt(got, v.pt, &iv)
				x.Decrypt(back, v.c, &iv)
				sg := make([]byte, len(v.pt))
				x.EncryptSectors(sg, v.pt, len(v.pt), bytes.Clone(v.iv))
				if !bytes.Equal(sg, v.c) {
					t.Errorf("%s %s: XTS EncryptSectors differs", impl, v.id)
				}
			default:
				continue
			}
			ran[v.mode]++
			if !bytes.Equal(got, v.c) {
				t.Errorf("%s %s: encrypt\n got %x\nwant %x", impl, v.id, got, v.c)
			}
			if !bytes.Equal(back, v.pt) {
				t.Errorf("%s %s: decrypt\n got %x\nwant %x", impl, v.id, back, v.pt)
			}
		}
		for _, m := range []string{"ecb", "cbc", "xts"} {
			if ran[m] == 0 {
				t.Errorf("%s: no %s vectors ran", impl, m)
			}
		}
	}
}

// blockCounts covers the group boundaries of the kernels (8 and 16 blocks,
// the padded tail from tailKernel) and sizes up to 64 KiB.
var blockCounts = []int{1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 15, 16, 17, 18, 23, 24, 25, 31, 32, 33, 40, 47, 48, 63, 64, 65, 100, 255, 256, 257, 1000, 4096}

// pair runs f on a fresh out-of-place buffer and in place, and returns
// both results.
func pair(src []byte, f func(dst, src []byte)) (out, in []byte) {
	out = make([]byte, len(src))
	f(out, src)
	in = bytes.Clone(src)
	f(in, in)
	return out, in
}

// TestImplsAgree compares every implementation with the generic one on
// random keys and data: ECB, CBC and XTS (with ciphertext stealing) both
// ways, the sector methods at 512 and 4096 bytes, in place and not.
func TestImplsAgree(t *testing.T) {
	impls := Impls()
	if len(impls) == 1 {
		// Legitimate: a CPU without AVX2 (or -tags purego) has nothing to compare.
		t.Skip("only the generic implementation here")
	}
	rng := rand.New(rand.NewSource(7))
	keyLens := []int{16, 24, 32, 0, 1, 5, 20, 31}
	for _, impl := range impls[:len(impls)-1] {
		for ki, kl := range keyLens {
			key := make([]byte, kl)
			rng.Read(key)
			key2 := make([]byte, keyLens[(ki+3)%len(keyLens)])
			rng.Read(key2)
			ref, fast := mustImpl(t, "generic", key), mustImpl(t, impl, key)
			refT, fastT := mustImpl(t, "generic", key2), mustImpl(t, impl, key2)
			refX, fastX := NewXTS(ref, refT), NewXTS(fast, fastT)
			cmp := func(what string, n int, g, f func(dst, src []byte), src []byte) {
				t.Helper()
				wo, wi := pair(src, g)
				go1, gi := pair(src, f)
				if !bytes.Equal(wo, go1) || !bytes.Equal(wi, gi) || !bytes.Equal(wo, wi) {
					t.Fatalf("%s key %d bytes: %s of %d bytes differs from generic", impl, kl, what, n)
				}
			}
			for _, nb := range blockCounts {
				if nb > 256 && ki > 2 {
					continue
				}
				src := make([]byte, 16*nb)
				rng.Read(src)
				var iv [16]byte
				rng.Read(iv[:])
				cmp("EncryptBlocks", len(src), ref.EncryptBlocks, fast.EncryptBlocks, src)
				cmp("DecryptBlocks", len(src), ref.DecryptBlocks, fast.DecryptBlocks, src)
				cmp("EncryptCBC", len(src), func(d, s []byte) { ref.EncryptCBC(d, s, &iv) }, func(d, s []byte) { fast.EncryptCBC(d, s, &iv) }, src)
				cmp("DecryptCBC", len(src), func(d, s []byte) { ref.DecryptCBC(d, s, &iv) }, func(d, s []byte) { fast.DecryptCBC(d, s, &iv) }, src)
				for _, extra := range []int{0, 1, 15} {
					if nb == 1 && extra > 0 {
						continue
					}
					s := src
					if extra > 0 {
						s = make([]byte, 16*nb+extra)
						rng.Read(s)
					}
					cmp("XTS Encrypt", len(s), func(d, s []byte) { refX.Encrypt(d, s, &iv) }, func(d, s []byte) { fastX.Encrypt(d, s, &iv) }, s)
					cmp("XTS Decrypt", len(s), func(d, s []byte) { refX.Decrypt(d, s, &iv) }, func(d, s []byte) { fastX.Decrypt(d, s, &iv) }, s)
				}
				// CBC decryption must also undo CBC encryption.
				ct := make([]byte, len(src))
				fast.EncryptCBC(ct, src, &iv)
				fast.DecryptCBC(ct, ct, &iv)
				if !bytes.Equal(ct, src) {
					t.Fatalf("%s: CBC round trip of %d blocks fails", impl, nb)
				}
			}
			for _, ss := range []int{512, 4096} {
				for _, ns := range []int{1, 2, 3, 7, 8, 9, 15, 16, 17, 24, 33} {
					if ss == 4096 && ns > 17 {
						continue
					}
					src := make([]byte, ss*ns)
					rng.Read(src)
					ivs := make([]byte, 16*ns)
					rng.Read(ivs)
					sec := func(f func(d, s []byte, ss int, ivs []byte)) func(d, s []byte) {
						return func(d, s []byte) { f(d, s, ss, bytes.Clone(ivs)) }
					}
					cmp("EncryptCBCSectors", len(src), sec(ref.EncryptCBCSectors), sec(fast.EncryptCBCSectors), src)
					cmp("DecryptCBCSectors", len(src), sec(ref.DecryptCBCSectors), sec(fast.DecryptCBCSectors), src)
					cmp("XTS EncryptSectors", len(src), sec(refX.EncryptSectors), sec(fastX.EncryptSectors), src)
					cmp("XTS DecryptSectors", len(src), sec(refX.DecryptSectors), sec(fastX.DecryptSectors), src)
					// The sector methods equal one call per sector.
					want := make([]byte, len(src))
					for s := 0; s < ns; s++ {
						iv := [16]byte(ivs[16*s:])
						ref.EncryptCBC(want[s*ss:(s+1)*ss], src[s*ss:(s+1)*ss], &iv)
					}
					got := make([]byte, len(src))
					fast.EncryptCBCSectors(got, src, ss, bytes.Clone(ivs))
					if !bytes.Equal(got, want) {
						t.Fatalf("%s: EncryptCBCSectors of %d×%d differs from EncryptCBC per sector", impl, ns, ss)
					}
					for s := 0; s < ns; s++ {
						iv := [16]byte(ivs[16*s:])
						refX.Encrypt(want[s*ss:(s+1)*ss], src[s*ss:(s+1)*ss], &iv)
					}
					fastX.EncryptSectors(got, src, ss, bytes.Clone(ivs))
					if !bytes.Equal(got, want) {
						t.Fatalf("%s: XTS EncryptSectors of %d×%d differs from Encrypt per sector", impl, ns, ss)
					}
				}
			}
		}
	}
}

// TestBulkNoAllocs keeps the data path free of allocations.
func TestBulkNoAllocs(t *testing.T) {
	for _, impl := range Impls() {
		c := mustImpl(t, impl, make([]byte, 32))
		x := NewXTS(c, mustImpl(t, impl, make([]byte, 32)))
		buf := make([]byte, 16*300)
		ivs := make([]byte, 16*18)
		var iv [16]byte
		n := testing.AllocsPerRun(20, func() {
			c.EncryptBlocks(buf, buf)
			c.DecryptBlocks(buf, buf)
			c.EncryptCBC(buf, buf, &iv)
			c.DecryptCBC(buf, buf, &iv)
			x.Encrypt(buf, buf[:len(buf)-7], &iv)
			x.Decrypt(buf, buf[:len(buf)-7], &iv)
			c.EncryptCBCSectors(buf[:512*9], buf[:512*9], 512, ivs)
			c.DecryptCBCSectors(buf[:512*9], buf[:512*9], 512, ivs)
			x.EncryptSectors(buf[:512*9], buf[:512*9], 512, ivs)
			x.DecryptSectors(buf[:512*9], buf[:512*9], 512, ivs)
		})
		if n != 0 {
			t.Errorf("%s: %v allocations per round", impl, n)
		}
	}
}

func TestBulkMisusePanics(t *testing.T) {
	c := mustImpl(t, Impls()[0], make([]byte, 16))
	x := NewXTS(c, c)
	buf := make([]byte, 256)
	var iv [16]byte
	for i, f := range []func(){
		func() { c.EncryptBlocks(buf, buf[:17]) },
		func() { c.EncryptBlocks(buf[:16], buf[:32]) },
		func() { c.EncryptBlocks(buf[16:48], buf[:32]) },
		func() { c.DecryptCBC(buf[1:33], buf[:32], &iv) },
		func() { x.Encrypt(buf[:15], buf[:15], &iv) },
		func() { c.EncryptCBCSectors(buf, buf, 100, make([]byte, 48)) },
		func() { c.EncryptCBCSectors(buf, buf, 64, make([]byte, 48)) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("case %d: no panic", i)
				}
			}()
			f()
		}()
	}
}

// TestGeneratedAsm checks that serpent_amd64.s is what _asm produces.
func TestGeneratedAsm(t *testing.T) {
	testenv.Generated(t, "_asm", "serpent_amd64.s", "internal/serpent")
}

// envGenerators set to 1 makes TestGeneratedCircuits rerun the S-box
// circuit searches (about a minute of CPU); scripts/test.sh sets it.
const envGenerators = "BLKCRYPT_SLOW_GENERATORS"

// TestGeneratedCircuits checks that sbox.go and _asm/circuits.go are what
// the one search in _asm writes: -sbox (scalar costs) and -search 1000
// (AVX2 costs).
func TestGeneratedCircuits(t *testing.T) {
	if os.Getenv(envGenerators) != "1" {
		// Legitimate: a minute of CPU for files that change only with the
		// generator; scripts/test.sh, the CI gate, runs it.
		t.Skipf("set %s=1 to rerun the S-box searches", envGenerators)
	}
	goTool := testenv.Need(t, "go", "golang-go")
	dir := t.TempDir()
	for _, c := range []struct {
		committed string
		args      []string
	}{
		{"sbox.go", []string{"-sbox", filepath.Join(dir, "sbox.go")}},
		{"_asm/circuits.go", []string{"-search", "1000", "-circuits", filepath.Join(dir, "circuits.go")}},
	} {
		want, err := os.ReadFile(c.committed)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(goTool, append([]string{"run", "."}, c.args...)...)
		cmd.Dir = "_asm"
		if msg, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("generator %v failed: %v\n%s", c.args, err, msg)
		}
		got, err := os.ReadFile(filepath.Join(dir, filepath.Base(c.committed)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what go run ./_asm %v writes", c.committed, c.args)
		}
	}
}

func BenchmarkXTS4096(b *testing.B) {
	for _, impl := range Impls() {
		for _, dir := range []string{"enc", "dec"} {
			b.Run(impl+"/"+dir, func(b *testing.B) {
				x := NewXTS(mustImpl(b, impl, make([]byte, 32)), mustImpl(b, impl, make([]byte, 32)))
				buf := make([]byte, 4096)
				var iv [16]byte
				b.SetBytes(4096)
				for b.Loop() {
					if dir == "enc" {
						x.Encrypt(buf, buf, &iv)
					} else {
						x.Decrypt(buf, buf, &iv)
					}
				}
			})
		}
	}
}

func BenchmarkCBC4096(b *testing.B) {
	for _, impl := range Impls() {
		c := mustImpl(b, impl, make([]byte, 32))
		buf := make([]byte, 16*4096)
		ivs := make([]byte, 16*16)
		var iv [16]byte
		b.Run(impl+"/enc16sectors", func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				c.EncryptCBCSectors(buf, buf, 4096, ivs)
			}
		})
		b.Run(impl+"/dec", func(b *testing.B) {
			b.SetBytes(4096)
			for b.Loop() {
				c.DecryptCBC(buf[:4096], buf[:4096], &iv)
			}
		})
	}
}

func BenchmarkECB4096(b *testing.B) {
	for _, impl := range Impls() {
		c := mustImpl(b, impl, make([]byte, 32))
		buf := make([]byte, 4096)
		b.Run(impl, func(b *testing.B) {
			b.SetBytes(4096)
			for b.Loop() {
				c.EncryptBlocks(buf, buf)
			}
		})
	}
}
