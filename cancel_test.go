package blkcrypt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// cancelSlack is how long after its deadline a cancelled call may take to
// return: the contract is 100 ms; the rest allows for a loaded 2-core CI
// machine. Every call below runs for seconds when not cancelled.
const cancelSlack = 400 * time.Millisecond

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func zeroImage(t *testing.T, size int64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(path, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runCancelled runs f with a 100 ms deadline and checks that it returns
// the deadline's error promptly.
func runCancelled(t *testing.T, f func(ctx context.Context) error) {
	t.Helper()
	const deadline = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	err := f(ctx)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded in the chain", err)
	}
	if took > deadline+cancelSlack {
		t.Fatalf("returned %v after a %v deadline", took, deadline)
	}
}

// Issue #25, bug 1: Format and AddKey ignored their context in the KDF
// (2.9 s for argon2id 256 MiB, 1.9 s for PBKDF2 5M iterations, 27 s for a
// benchmarked argon2id, all with a 100 ms deadline) and wrote the header.
func TestFormatHonoursContext(t *testing.T) {
	cases := []struct {
		name string
		o    FormatOptions
	}{
		{"argon2id 256 MiB", FormatOptions{PBKDF: PBKDFOptions{Type: "argon2id", Iterations: 4, MemoryKiB: 256 << 10, Parallel: 1}}},
		{"pbkdf2 5M", FormatOptions{PBKDF: PBKDFOptions{Type: "pbkdf2", Iterations: 5_000_000}}},
		{"benchmarked argon2id", FormatOptions{}},
		{"benchmarked pbkdf2", FormatOptions{PBKDF: PBKDFOptions{Type: "pbkdf2"}}},
		{"luks1 pbkdf2 5M", FormatOptions{Type: "luks1", PBKDF: PBKDFOptions{Iterations: 5_000_000}}},
		{"luks1 benchmarked", FormatOptions{Type: "luks1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := zeroImage(t, 32<<20)
			before := fileSum(t, path)
			runCancelled(t, func(ctx context.Context) error {
				return Format(ctx, path, []byte("pass"), c.o)
			})
			if fileSum(t, path) != before {
				t.Fatal("a cancelled Format wrote to the device")
			}
		})
	}
}

func TestAddKeyHonoursContext(t *testing.T) {
	for _, typ := range []string{"luks2", "luks1"} {
		path := zeroImage(t, 32<<20)
		fast := PBKDFOptions{Type: "pbkdf2", Iterations: 1000}
		if err := Format(context.Background(), path, []byte("old"), FormatOptions{Type: typ, PBKDF: fast}); err != nil {
			t.Fatal(err)
		}
		before := fileSum(t, path)
		slow := []PBKDFOptions{{Type: "pbkdf2", Iterations: 5_000_000}, {}}
		if typ == "luks2" {
			slow = append(slow, PBKDFOptions{Type: "argon2id", Iterations: 4, MemoryKiB: 256 << 10, Parallel: 1})
		}
		for _, p := range slow {
			runCancelled(t, func(ctx context.Context) error {
				_, err := AddKey(ctx, path, []byte("old"), []byte("new"), p)
				return err
			})
			if fileSum(t, path) != before {
				t.Fatalf("%s: a cancelled AddKey (%+v) wrote to the device", typ, p)
			}
		}
		// The same call without a deadline does add the key: the
		// cancellation above was the only thing that stopped it.
		if _, err := AddKey(context.Background(), path, []byte("old"), []byte("new"), fast); err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(sum(fileSum(t, path)), sum(before)) {
			t.Fatal("AddKey without a deadline changed nothing")
		}
	}
}

func sum(b [32]byte) []byte { return b[:] }
