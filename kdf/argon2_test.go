package kdf

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"

	"golang.org/x/crypto/argon2"
)

// TestArgon2RFC9106 checks the test vectors of RFC 9106 section 5 (t=3,
// m=32 KiB, p=4, with a secret and associated data), Argon2d included
// since the core computes it too.
func TestArgon2RFC9106(t *testing.T) {
	pw := bytes.Repeat([]byte{1}, 32)
	salt := bytes.Repeat([]byte{2}, 16)
	secret := bytes.Repeat([]byte{3}, 8)
	ad := bytes.Repeat([]byte{4}, 12)
	for _, v := range []struct {
		name string
		mode uint32
		tag  string
	}{
		{"argon2d", argon2TypeD, "512b391b6f1162975371d30919734294f868e3be3984f3c1a13a4db9fabe4acb"},
		{"argon2i", argon2TypeI, "c814d9d1dc7f37aa13f0d77f2494bda1c8de6b016dd388d29952a4c4672b6ce8"},
		{"argon2id", argon2TypeID, "0d640df58d78766c08c037a34a8b53c9d01ef0452d75b65eb52520e96b01e659"},
	} {
		got, err := argon2Derive(nil, v.mode, pw, salt, secret, ad, 3, 32, 4, 32)
		if err != nil {
			t.Fatal(err)
		}
		if hex.EncodeToString(got) != v.tag {
			t.Errorf("%s: got %x, want %s", v.name, got, v.tag)
		}
	}
}

// TestArgon2CryptsetupVectors runs cryptsetup's Argon2 vectors through
// Argon2Key directly (TestCryptsetupVectors does so through Derive).
func TestArgon2CryptsetupVectors(t *testing.T) {
	n := 0
	for _, v := range loadVectors(t) {
		if v.KDF == PBKDF2 {
			continue
		}
		n++
		got, err := Argon2Key(context.Background(), v.KDF, unhex(t, v.Password), unhex(t, v.Salt), v.Iterations, v.MemoryKiB, v.Parallelism, v.OutLen)
		if err != nil {
			t.Fatal(err)
		}
		if want := unhex(t, v.Output); !bytes.Equal(got, want) {
			t.Errorf("%s: got %x, want %x", v.ID, got, want)
		}
	}
	if n != 4 {
		t.Fatalf("%d argon2 vectors, want 4", n)
	}
}

// TestArgon2HPrimeLengths compares with x/crypto over key lengths around
// H's 32- and 64-byte boundaries, where H' changes shape.
func TestArgon2HPrimeLengths(t *testing.T) {
	for _, n := range []int{1, 4, 31, 32, 33, 63, 64, 65, 95, 96, 97, 127, 128, 129, 200, 1024, 1025} {
		got, err := Argon2Key(context.Background(), Argon2id, []byte("pw"), []byte("saltsalt"), 1, 64, 2, n)
		if err != nil {
			t.Fatal(err)
		}
		if want := argon2.IDKey([]byte("pw"), []byte("saltsalt"), 1, 64, 2, uint32(n)); !bytes.Equal(got, want) {
			t.Errorf("key length %d: differs from x/crypto", n)
		}
	}
}

// TestArgon2MatchesXCrypto compares with golang.org/x/crypto/argon2 over
// lane counts, memories that are not multiples of 4p or are below 8p
// (both round the same way) and several passes, so that cross-lane
// references and the later-pass XOR are exercised.
func TestArgon2MatchesXCrypto(t *testing.T) {
	for _, c := range []struct{ time, mem, par uint32 }{
		{1, 8, 1}, {1, 9, 3}, {2, 100, 3}, {3, 256, 4}, {1, 1000, 7}, {4, 4096, 2}, {2, 16, 5},
	} {
		for _, typ := range []string{Argon2i, Argon2id} {
			got, err := Argon2Key(context.Background(), typ, []byte("password"), []byte("somesalt"), c.time, c.mem, c.par, 32)
			if err != nil {
				t.Fatal(err)
			}
			f := argon2.IDKey
			if typ == Argon2i {
				f = argon2.Key
			}
			if want := f([]byte("password"), []byte("somesalt"), c.time, c.mem, uint8(c.par), 32); !bytes.Equal(got, want) {
				t.Errorf("%s t=%d m=%d p=%d: got %x, want %x", typ, c.time, c.mem, c.par, got, want)
			}
		}
	}
}

func TestArgon2KeyInvalid(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		typ                 string
		time, mem, par, len int
	}{
		{"argon2d", 1, 64, 1, 32}, {Argon2id, 0, 64, 1, 32}, {Argon2id, 1, 64, 0, 32},
		{Argon2id, 1, 64, 256, 32}, {Argon2id, 1, 64, 1, 0}, {Argon2i, 1, MaxArgon2MemoryKiB + 1, 1, 32},
	} {
		if _, err := Argon2Key(ctx, c.typ, nil, nil, uint32(c.time), uint32(c.mem), uint32(c.par), c.len); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if _, err := Argon2KeyStop(func() bool { return true }, Argon2id, nil, nil, 1, 64, 1, 32); !errors.Is(err, ErrStopped) {
		t.Errorf("stopped: %v", err)
	}
}

// FuzzArgon2 compares with golang.org/x/crypto/argon2 over small random
// parameters and inputs.
func FuzzArgon2(f *testing.F) {
	f.Add(uint8(1), uint8(1), uint16(8), uint8(1), uint8(32), []byte("password"), []byte("somesalt"))
	f.Add(uint8(2), uint8(3), uint16(100), uint8(3), uint8(65), []byte(""), []byte("s"))
	f.Add(uint8(1), uint8(2), uint16(512), uint8(4), uint8(4), []byte{0}, []byte{})
	f.Fuzz(func(t *testing.T, typ, time uint8, mem uint16, par, keyLen uint8, pw, salt []byte) {
		k := Argon2id
		ref := argon2.IDKey
		if typ%2 == 1 {
			k, ref = Argon2i, argon2.Key
		}
		tc := uint32(time%3) + 1
		p := uint32(par%8) + 1
		m := uint32(mem % 2048)
		n := int(keyLen) + 1
		got, err := Argon2Key(context.Background(), k, pw, salt, tc, m, p, n)
		if err != nil {
			t.Fatal(err)
		}
		if want := ref(pw, salt, tc, m, uint8(p), uint32(n)); !bytes.Equal(got, want) {
			t.Fatalf("%s t=%d m=%d p=%d len=%d: got %x, want %x", k, tc, m, p, n, got, want)
		}
	})
}

// TestProcessBlock compares the block function in use (assembly where
// there is one) with the portable one on varied inputs, with and
// without the XOR into the output.
func TestProcessBlock(t *testing.T) {
	var x, y, o1, o2 block
	s := uint64(0x0123456789abcdef)
	for round := 0; round < 200; round++ {
		for i := range x {
			s = s*6364136223846793005 + 1442695040888963407
			x[i] = s
			s = s*6364136223846793005 + 1442695040888963407
			y[i] = s ^ s>>29
		}
		if round%7 == 0 {
			y = block{} // the address generator's zero block
		}
		xor := round%2 == 1
		o1, o2 = x, x
		processBlock(&o1, &x, &y, xor)
		processBlockGeneric(&o2, &x, &y, xor)
		if o1 != o2 {
			t.Fatalf("round %d (xor %v): processBlock differs from processBlockGeneric", round, xor)
		}
	}
	// In place, as the address generator does.
	o1, o2 = x, x
	processBlock(&o1, &o1, &y, false)
	processBlockGeneric(&o2, &o2, &y, false)
	if o1 != o2 {
		t.Fatal("in place: processBlock differs")
	}
}

var sinkKey []byte

func benchParams() []struct{ time, mem, par uint32 } {
	return []struct{ time, mem, par uint32 }{{4, 64 << 10, 1}, {4, 64 << 10, 2}, {4, 256 << 10, 4}}
}

// BenchmarkArgon2 compares ours with golang.org/x/crypto/argon2; report
// with go test -run XXX -bench Argon2 ./kdf/
func BenchmarkArgon2(b *testing.B) {
	for _, c := range benchParams() {
		name := fmt.Sprintf("t=%d/m=%dMiB/p=%d", c.time, c.mem>>10, c.par)
		b.Run("blkcrypt/"+name, func(b *testing.B) {
			b.SetBytes(int64(c.time) * int64(c.mem) << 10)
			for b.Loop() {
				k, err := Argon2Key(context.Background(), Argon2id, []byte("pw"), []byte("saltsaltsaltsalt"), c.time, c.mem, c.par, 32)
				if err != nil {
					b.Fatal(err)
				}
				sinkKey = k
			}
		})
		b.Run("xcrypto/"+name, func(b *testing.B) {
			b.SetBytes(int64(c.time) * int64(c.mem) << 10)
			for b.Loop() {
				sinkKey = argon2.IDKey([]byte("pw"), []byte("saltsaltsaltsalt"), c.time, c.mem, uint8(c.par), 32)
			}
		})
	}
}

func BenchmarkProcessBlock(b *testing.B) {
	var x, y, o block
	for i := range x {
		x[i] = binary.LittleEndian.Uint64([]byte{byte(i), 1, 2, 3, 4, 5, 6, 7})
		y[i] = uint64(i) * 0x9e3779b97f4a7c15
	}
	b.SetBytes(1024)
	for b.Loop() {
		processBlock(&o, &x, &y, true)
	}
}
