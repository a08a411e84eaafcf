package af

import (
	"bytes"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"hash"
	"testing"
)

// countingReader yields i%251 for the i-th byte, so split output is fixed.
type countingReader struct{ n int }

func (r *countingReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r.n % 251)
		r.n++
	}
	return len(p), nil
}

// The expected values were computed by an independent implementation of
// the cryptsetup splitter (diffuse with a big-endian block index and a
// truncated final block) written for this test, not by this package.
func TestSplitKnownAnswer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		h       func() hash.Hash
		keyLen  int
		stripes int
		want    string
	}{
		{"sha1", sha1.New, 32, 4, "86d77a107398d518461eaacfc4593db22bffe15e6fa45224f02700fe08dd7a8d"},
		{"sha256", sha256.New, 16, 7, "f52baf53e4e4a6e4fe2cc3239cb8ba970587e1ce9e14a8c83a3401e74f9e3a76"},
		{"sha512", sha512.New, 100, 3, "6d4d4f4fb6f93e50ac541c620d9966f25cdb4d31df83429bb46206d10f9ac25a"},
		{"sha1-4000", sha1.New, 64, 4000, "851d214ac6e4c05a6cfc2a7062768215b92597b7aac15c84b09f33b566cf2001"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := make([]byte, tc.keyLen)
			for i := range key {
				key[i] = byte((i*7 + 3) % 256)
			}
			dst := make([]byte, Size(tc.keyLen, tc.stripes))
			if err := Split(dst, key, tc.stripes, tc.h, &countingReader{}); err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(dst)
			if got := hex.EncodeToString(sum[:]); got != tc.want {
				t.Fatalf("split material sha256 = %s, want %s", got, tc.want)
			}
			back := make([]byte, tc.keyLen)
			if err := Merge(back, dst, tc.stripes, tc.h); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(back, key) {
				t.Fatal("merge did not return the key")
			}
		})
	}
}

func TestRoundTripAndDamage(t *testing.T) {
	for _, n := range []int{1, 16, 20, 32, 33, 64, 65} {
		key := make([]byte, n)
		rand.Read(key)
		dst := make([]byte, Sectors(n, 4000)*512)
		if err := Split(dst, key, 4000, sha256.New, nil); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, n)
		if err := Merge(got, dst, 4000, sha256.New); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, key) {
			t.Fatalf("n=%d: round trip failed", n)
		}
		if n < 16 {
			continue // tiny keys: the diffuser's random walks merge
		}
		dst[n*10] ^= 1 // any damaged stripe destroys the key
		Merge(got, dst, 4000, sha256.New)
		if bytes.Equal(got, key) {
			t.Fatalf("n=%d: damaged material still merged to the key", n)
		}
	}
}

func TestInvalid(t *testing.T) {
	if err := Split(make([]byte, 10), make([]byte, 4), 4, sha1.New, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("short dst: %v", err)
	}
	if err := Merge(make([]byte, 4), make([]byte, 16), 0, sha1.New); !errors.Is(err, ErrInvalid) {
		t.Fatalf("zero stripes: %v", err)
	}
	if err := Merge(nil, make([]byte, 16), 4, sha1.New); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty key: %v", err)
	}
	if Sectors(32, 4000) != 250 || Sectors(16, 4000) != 125 || Sectors(64, 4000) != 500 {
		t.Fatal("Sectors disagrees with cryptsetup's AF_split_sectors")
	}
}

func BenchmarkMerge4000x64(b *testing.B) {
	key := make([]byte, 64)
	dst := make([]byte, Size(64, 4000))
	Split(dst, key, 4000, sha256.New, nil)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		Merge(key, dst, 4000, sha256.New)
	}
}
