package kdf

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

// TestDeriveContext: a cancelled derivation returns at once with the
// context's error, PBKDF2 (checked between iterations) and Argon2
// (checked between blocks) alike; an uncancelled one gives the same key
// as Derive. TestArgon2CancelReleases checks that nothing runs on.
func TestDeriveContext(t *testing.T) {
	salt := bytes.Repeat([]byte{7}, 32)
	for _, p := range []Params{
		{Type: PBKDF2, Hash: "sha256", Iterations: 1 << 30},
		{Type: Argon2id, Iterations: 30, MemoryKiB: 64 << 10, Parallel: 1}, // ~1-2 s uncancelled
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		start := time.Now()
		k, err := DeriveContext(ctx, p, []byte("pw"), salt, 32)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || k != nil {
			t.Errorf("%s: %v, key %v; want DeadlineExceeded and no key", p, err, k != nil)
		}
		if d := time.Since(start); d > 50*time.Millisecond+time.Second {
			t.Errorf("%s: returned after %v", p, d)
		}
	}
	p := Params{Type: Argon2id, Iterations: 4, MemoryKiB: 64, Parallel: 1}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := DeriveContext(ctx, p, []byte("pw"), salt, 32)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Derive(p, []byte("pw"), salt, 32)
	if err != nil || !bytes.Equal(a, b) {
		t.Fatalf("DeriveContext and Derive differ (%v)", err)
	}
	q := Params{Type: PBKDF2, Hash: "sha256", Iterations: 5000}
	a, _ = DeriveContext(ctx, q, []byte("pw"), salt, 32)
	b, _ = Derive(q, []byte("pw"), salt, 32)
	if !bytes.Equal(a, b) {
		t.Fatal("PBKDF2 with a context differs")
	}
}
