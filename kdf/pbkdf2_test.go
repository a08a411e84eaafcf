package kdf

import (
	"bytes"
	"crypto/pbkdf2"
	"fmt"
	"hash"
	"testing"
)

// pbkdf2Hashes are the hashes LUKS and TrueCrypt/VeraCrypt derive with,
// in cryptsetup's spelling.
var pbkdf2Hashes = []string{"sha1", "sha256", "sha512", "ripemd160", "whirlpool", "blake2s-256", "stribog512", "sha3-256", "blake2b-512"}

// TestPBKDF2AllHashes compares with crypto/pbkdf2 for every hash, with
// passwords shorter and longer than the hash's block, several output
// blocks and a partial last one.
func TestPBKDF2AllHashes(t *testing.T) {
	for _, name := range pbkdf2Hashes {
		h, err := HashFunc(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, pw := range []string{"", "pw", string(bytes.Repeat([]byte("long password "), 20))} {
			n := 2*h().Size() + 5
			want, err := pbkdf2.Key(h, pw, []byte("salt of some length"), 1100, n)
			if err != nil {
				t.Fatal(err)
			}
			got, err := PBKDF2Key(h, []byte(pw), []byte("salt of some length"), 1100, n)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s, password of %d bytes: differs from crypto/pbkdf2", name, len(pw))
			}
		}
	}
}

// TestPBKDF2BlockStretches: a block run in stretches (as tcrypt's search
// does, sharing the early iterations between derivations), stopped and
// resumed, ends where crypto/pbkdf2 does at each iteration count.
func TestPBKDF2BlockStretches(t *testing.T) {
	for _, name := range []string{"sha512", "ripemd160", "whirlpool"} {
		h, _ := HashFunc(name)
		b := NewPBKDF2Block(h, []byte("password"), []byte("salt"), 2)
		polls := 0
		stopOnce := func() bool { polls++; return polls == 1 }
		for _, n := range []uint32{1, 2, 999, 2500, 2501} {
			for !b.Run(n, stopOnce) {
				// Stopped once at the first poll; the rest of the run
				// continues from there.
			}
			if b.Iterations() != n {
				t.Fatalf("%s: %d iterations, want %d", name, b.Iterations(), n)
			}
			want, _ := pbkdf2.Key(h, "password", []byte("salt"), int(n), 2*h().Size())
			if !bytes.Equal(b.Sum(), want[h().Size():]) {
				t.Errorf("%s: block 2 after %d iterations differs from crypto/pbkdf2", name, n)
			}
		}
		if polls < 2 {
			t.Errorf("%s: stop polled %d times", name, polls)
		}
		b.Wipe()
		if !bytes.Equal(b.Sum(), make([]byte, h().Size())) {
			t.Errorf("%s: Wipe left the block", name)
		}
	}
}

// TestHMACSnapshot: every hash's keyed state is restored without
// rehashing the key block; ripemd160 and whirlpool, which do not marshal
// their state, by copying their struct (tcrypt's search speed depends on
// it).
func TestHMACSnapshot(t *testing.T) {
	for _, name := range pbkdf2Hashes {
		h, _ := HashFunc(name)
		m := newHMAC(h, []byte("key"))
		kind := "rehash"
		switch {
		case m.innerS.live != nil:
			kind = "struct copy"
		case m.innerS.state != nil:
			kind = "unmarshal"
		}
		t.Logf("%s (%T): %s", name, h(), kind)
		if kind == "rehash" || (name == "ripemd160" || name == "whirlpool") && kind != "struct copy" {
			t.Errorf("%s: restored by %s", name, kind)
		}
		m.wipe()
	}
}

// TestHMACSnapshotFallbacks: the unmarshal and rehash paths give HMAC too
// (hashes whose struct holds pointers, or that do not marshal).
func TestHMACSnapshotFallbacks(t *testing.T) {
	sha, _ := HashFunc("sha256")
	want, _ := pbkdf2.Key(sha, "pw", []byte("salt"), 3, 40)
	for _, c := range []struct {
		name string
		f    func() hash.Hash
	}{
		{"unmarshal", func() hash.Hash { return &boxed{sha()} }},
		{"rehash", func() hash.Hash { return struct{ hash.Hash }{sha()} }},
	} {
		s := newHMAC(c.f, []byte("pw")).innerS
		if s.live != nil || (s.state != nil) != (c.name == "unmarshal") {
			t.Fatalf("%s: the test hash takes another path", c.name)
		}
		got, err := PBKDF2Key(c.f, []byte("pw"), []byte("salt"), 3, 40)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %x %v", c.name, got, err)
		}
	}
}

// boxed hides its hash behind a pointer (no struct copy) but marshals.
type boxed struct{ hash.Hash }

func (b *boxed) MarshalBinary() ([]byte, error) {
	return b.Hash.(interface{ MarshalBinary() ([]byte, error) }).MarshalBinary()
}
func (b *boxed) UnmarshalBinary(p []byte) error {
	return b.Hash.(interface{ UnmarshalBinary([]byte) error }).UnmarshalBinary(p)
}

// BenchmarkPBKDF2 is the cost of one iteration for each hash.
func BenchmarkPBKDF2(b *testing.B) {
	for _, name := range pbkdf2Hashes {
		h, _ := HashFunc(name)
		b.Run(fmt.Sprint(name), func(b *testing.B) {
			for b.Loop() {
				k, _ := PBKDF2Key(h, []byte("pw"), []byte("salt"), 10000, h().Size())
				clear(k)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10000, "ns/iteration")
		})
	}
}
