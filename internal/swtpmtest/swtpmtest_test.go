package swtpmtest

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"strings"
	"testing"
)

// TestRestartKeepsStateResetsPCRs: swtpm's PCR 7 extends as TPM 2.0 says
// (new = SHA-256(old || digest)), and a restart over the same state
// directory comes back with its PCRs reset, as after a power-on, and the
// same owner seed (the same primary key from the same template), which
// is what lets a guest and the host share one TPM.
func TestRestartKeepsStateResetsPCRs(t *testing.T) {
	dir := t.TempDir()
	s := Start(t, dir)
	if s.StateDir != dir || !strings.HasPrefix(s.TCTI, "swtpm:host=127.0.0.1,port=") {
		t.Fatalf("Start: state %q, TCTI %q", s.StateDir, s.TCTI)
	}
	zero := strings.Repeat("00", 32)
	if p := s.PCR(t, 7); p != zero {
		t.Fatalf("PCR 7 of a fresh swtpm is %s, want zeros", p)
	}
	d := sha256.Sum256([]byte("event"))
	want := sha256.Sum256(append(make([]byte, 32), d[:]...))
	if p := s.ExtendPCR(t, 7, hex.EncodeToString(d[:])); p != hex.EncodeToString(want[:]) {
		t.Fatalf("PCR 7 after one extend is %s, want %x", p, want)
	}
	primary := func() string {
		out := s.Tool(t, "tpm2_createprimary", "-C", "o", "-g", "sha256", "-G", "ecc256", "-c", filepath.Join(t.TempDir(), "ctx"))
		for _, l := range strings.Split(out, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "x: "); ok {
				return v // the public key's X coordinate
			}
		}
		t.Fatalf("tpm2_createprimary printed no public key: %s", out)
		return ""
	}
	before := primary()
	s.Stop(t)
	s = Start(t, dir)
	if p := s.PCR(t, 7); p != zero {
		t.Fatalf("PCR 7 after a restart is %s, want zeros", p)
	}
	if after := primary(); after != before {
		t.Fatalf("the owner's primary key changed over a restart: %s, then %s", before, after)
	}
	// A fresh state directory is another TPM.
	other := Start(t, "")
	s = other
	if p := primary(); p == before {
		t.Fatalf("two swtpm state directories gave the same primary key %s", p)
	}
}
