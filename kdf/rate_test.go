package kdf

import "testing"

// TestPBKDF2PerSecond: a rate for a known hash, an error for another.
func TestPBKDF2PerSecond(t *testing.T) {
	if r, err := PBKDF2PerSecond("sha256"); err != nil || r <= 0 {
		t.Errorf("sha256: %v, %v", r, err)
	}
	if _, err := PBKDF2PerSecond("nosuch"); err == nil {
		t.Error("an unknown hash measured")
	}
}
