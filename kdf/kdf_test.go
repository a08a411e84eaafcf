package kdf

import (
	"bytes"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"
)

type vector struct {
	ID          string  `json:"id"`
	KDF         string  `json:"kdf"`
	Hash        *string `json:"hash"`
	Iterations  uint32  `json:"iterations"`
	MemoryKiB   uint32  `json:"memory_kib"`
	Parallelism uint32  `json:"parallelism"`
	Password    string  `json:"password_hex"`
	Salt        string  `json:"salt_hex"`
	OutLen      int     `json:"output_length"`
	Output      string  `json:"output_hex"`
}

func loadVectors(t *testing.T) []vector {
	t.Helper()
	b, err := os.ReadFile("testdata/cryptsetup_kdf.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Vectors []vector `json:"vectors"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Vectors) != 21 {
		t.Fatalf("expected 21 vectors, got %d", len(f.Vectors))
	}
	return f.Vectors
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCryptsetupVectors(t *testing.T) {
	for _, v := range loadVectors(t) {
		t.Run(v.ID, func(t *testing.T) {
			p := Params{Type: v.KDF, Iterations: v.Iterations, MemoryKiB: v.MemoryKiB, Parallel: v.Parallelism}
			if v.Hash != nil {
				p.Hash = *v.Hash
				if _, err := HashFunc(p.Hash); err != nil {
					t.Fatalf("hash %s of cryptsetup's vectors: %v", p.Hash, err)
				}
			}
			if v.Iterations > 1<<20 && testing.Short() {
				// Legitimate: the full run checks it; -short is for quick loops.
				t.Skip("long iteration count in -short mode")
			}
			got, err := Derive(p, unhex(t, v.Password), unhex(t, v.Salt), v.OutLen)
			if err != nil {
				t.Fatal(err)
			}
			if want := unhex(t, v.Output); !bytes.Equal(got, want) {
				t.Fatalf("%s: got %x, want %x", p, got, want)
			}
		})
	}
}

func TestPBKDF2MatchesStdlib(t *testing.T) {
	pw := bytes.Repeat([]byte("long password "), 10) // longer than a block
	for _, n := range []int{1, 20, 32, 33, 64, 100} {
		want, err := pbkdf2.Key(sha256.New, string(pw), []byte("salt"), 3, n)
		if err != nil {
			t.Fatal(err)
		}
		got, err := PBKDF2Key(sha256.New, pw, []byte("salt"), 3, n)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("len %d: mismatch", n)
		}
	}
}

func TestHashNames(t *testing.T) {
	for _, n := range []string{"sha1", "SHA256", "sha512", "ripemd160", "sha3-256", "blake2b-512"} {
		if _, err := HashFunc(n); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	if _, err := HashFunc("md4x"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("unknown hash: %v", err)
	}
}

func TestValidate(t *testing.T) {
	bad := []Params{
		{Type: "scrypt", Iterations: 1},
		{Type: PBKDF2, Hash: "sha256"},
		{Type: PBKDF2, Hash: "nohash", Iterations: 1000},
		{Type: Argon2id, Iterations: 0, MemoryKiB: 32, Parallel: 1},
		{Type: Argon2id, Iterations: 1, MemoryKiB: 32, Parallel: 0},
		{Type: Argon2i, Iterations: 1, MemoryKiB: MaxArgon2MemoryKiB + 1, Parallel: 1},
		{Type: Argon2i, Iterations: 1, MemoryKiB: 32, Parallel: 256},
	}
	for _, p := range bad {
		if _, err := Derive(p, []byte("x"), []byte("saltsalt"), 32); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
}

func TestOptionsCheck(t *testing.T) {
	for _, tc := range []struct {
		o  Options
		ok bool
	}{
		{Options{Type: PBKDF2, Iterations: 1000}, true},
		{Options{Type: PBKDF2, Iterations: 999}, false},
		{Options{Type: PBKDF2, MemoryKiB: 32}, false},
		{Options{Type: Argon2id, Iterations: 4, MemoryKiB: 32, Parallel: 1}, true},
		{Options{Type: Argon2id, Iterations: 3, MemoryKiB: 32, Parallel: 1}, false},
		{Options{Type: Argon2id, Iterations: 4, MemoryKiB: 31}, false},
		{Options{Type: Argon2id, Parallel: 5}, false},
		{Options{Type: "bcrypt"}, false},
		{Options{Hash: "nohash"}, false},
	} {
		err := tc.o.Check(Argon2id)
		if (err == nil) != tc.ok {
			t.Errorf("%+v: err=%v, want ok=%v", tc.o, err, tc.ok)
		}
	}
}

func TestResolveForced(t *testing.T) {
	p, err := Resolve(Options{Type: Argon2i, Iterations: 5}, PBKDF2, 32)
	if err != nil {
		t.Fatal(err)
	}
	if p.Type != Argon2i || p.Iterations != 5 || p.MemoryKiB != DefaultMemoryKiB || p.Parallel != DefaultParallel {
		t.Fatalf("forced argon2i: %+v", p)
	}
	p, err = Resolve(Options{Iterations: 1000}, PBKDF2, 32)
	if err != nil || p.Type != PBKDF2 || p.Hash != "sha256" || p.Iterations != 1000 {
		t.Fatalf("forced pbkdf2: %+v %v", p, err)
	}
	if n, err := DigestIterations(Options{Iterations: 1000}, "sha256", 32); err != nil || n != 1000 {
		t.Fatalf("forced digest iterations: %d %v", n, err)
	}
}

func TestBenchmarkPBKDF2(t *testing.T) {
	if testing.Short() {
		t.Skip("benchmark takes about a second")
	}
	start := time.Now()
	p, err := Resolve(Options{Type: PBKDF2, IterTime: 100 * time.Millisecond}, PBKDF2, 32)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pbkdf2-sha256 for 100 ms: %d iterations (benchmark took %v)", p.Iterations, time.Since(start))
	if p.Iterations < MinPBKDF2Iterations {
		t.Fatalf("iterations %d below the minimum", p.Iterations)
	}
	// The result should take roughly the target time; allow wide margins
	// on a shared CI machine.
	start = time.Now()
	k, _ := Derive(p, []byte("pw"), []byte("salt"), 32)
	clear(k)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("derivation took %v for a 100 ms target", d)
	}
}

func TestBenchmarkArgon2(t *testing.T) {
	if testing.Short() {
		t.Skip("benchmark takes about a second")
	}
	p, err := Resolve(Options{Type: Argon2id, IterTime: 50 * time.Millisecond, MemoryKiB: 8 * 1024, Parallel: 2}, PBKDF2, 32)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("argon2id for 50 ms with at most 8 MiB: %s", p)
	if p.Iterations < MinArgon2Time || p.MemoryKiB > 8*1024 || p.MemoryKiB < 16 || p.Parallel != 2 && p.Parallel != 1 {
		t.Fatalf("unexpected parameters %+v", p)
	}
}

func TestNextArgon2(t *testing.T) {
	// Too slow at the minimum time cost: memory shrinks.
	tc, m := uint32(4), uint32(65536)
	if done := nextArgon2(&tc, &m, 4, 64, 1<<20, 1000, 500); done || tc != 4 || m != 32768 {
		t.Fatalf("shrink: t=%d m=%d done=%v", tc, m, done)
	}
	// Too fast: memory grows up to the cap, then time.
	tc, m = 4, 65536
	if done := nextArgon2(&tc, &m, 4, 64, 131072, 250, 2000); done || m != 131072 || tc != 16 {
		t.Fatalf("grow: t=%d m=%d done=%v", tc, m, done)
	}
	if AdjustedPhysMemoryKiB() == 0 {
		t.Fatal("no memory ceiling")
	}
}
