package luks2_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/powercut"
	"github.com/blkcrypt/blkcrypt/luks2"
)

// TestPlanEncryptDecrypt: PlanEncrypt and PlanDecrypt say what Encrypt
// and Decrypt do (start, resume, export) and refuse what they refuse,
// writing nothing; a new encryption's UUID is the one Encrypt writes.
func TestPlanEncryptDecrypt(t *testing.T) {
	ctx := context.Background()
	pass := []byte("plan")
	plain := make([]byte, 8<<20)
	rand.Read(plain)
	dev := powercut.New(plain)
	same := func(what string, before []byte) {
		t.Helper()
		if !bytes.Equal(dev.Current(), before) {
			t.Fatalf("%s wrote to the device", what)
		}
	}
	eo := luks2.EncryptOptions{ReduceDeviceSize: 2 << 20, Keyslot: reencKDF}

	// A plain device: a new encryption, its UUID made here.
	if _, err := luks2.PlanEncrypt(ctx, dev, &luks2.EncryptOptions{ResumeOnly: true}); !errors.Is(err, luks2.ErrNoReencryption) {
		t.Fatalf("resume-only of a plain device: %v", err)
	}
	o := eo
	plan, err := luks2.PlanEncrypt(ctx, dev, &o)
	if err != nil || plan.Resume || plan.UUID == "" || o.UUID != plan.UUID {
		t.Fatalf("plain device: %+v, %v (options' UUID %q)", plan, err, o.UUID)
	}
	same("PlanEncrypt", plain)
	o.InitOnly = true
	if err := luks2.Encrypt(ctx, dev, pass, o); err != nil {
		t.Fatal(err)
	}
	h, err := luks2.Read(dev)
	if err != nil || h.UUID() != plan.UUID {
		t.Fatalf("after init: %v, UUID %q, planned %q", err, h.UUID(), plan.UUID)
	}

	// An encryption in progress: resumed; init again and decryption refused.
	initState := dev.Current()
	o = eo
	if plan, err := luks2.PlanEncrypt(ctx, dev, &o); err != nil || !plan.Resume || plan.UUID != h.UUID() {
		t.Fatalf("encryption in progress: %+v, %v", plan, err)
	}
	o.InitOnly = true
	if _, err := luks2.PlanEncrypt(ctx, dev, &o); !errors.Is(err, luks2.ErrReencryptInProgress) || !errors.Is(err, luks2.ErrInvalidOptions) {
		t.Fatalf("init-only of an encryption in progress: %v", err)
	}
	if _, err := luks2.PlanDecrypt(ctx, dev, dev, luks2.DecryptOptions{}); !errors.Is(err, luks2.ErrReencryptInProgress) {
		t.Fatalf("decryption of an encryption in progress: %v", err)
	}
	same("a refused plan", initState)

	// Finished: a LUKS2 volume with its header on the device.
	if err := luks2.Encrypt(ctx, dev, pass, eo); err != nil {
		t.Fatal(err)
	}
	done := dev.Current()
	o = eo
	if _, err := luks2.PlanEncrypt(ctx, dev, &o); !errors.Is(err, luks2.ErrAlreadyLUKS) {
		t.Fatalf("encryption of a LUKS2 volume: %v", err)
	}
	if _, err := luks2.PlanDecrypt(ctx, dev, dev, luks2.DecryptOptions{}); !errors.Is(err, luks2.ErrDecryptAttached) {
		t.Fatalf("decryption without a header device: %v", err)
	}
	if _, err := luks2.PlanDecrypt(ctx, nil, dev, luks2.DecryptOptions{ResumeOnly: true}); !errors.Is(err, luks2.ErrNoReencryption) {
		t.Fatalf("resume-only decryption of a volume: %v", err)
	}
	dp, err := luks2.PlanDecrypt(ctx, nil, dev, luks2.DecryptOptions{})
	if err != nil || dp.Resume || !dp.Export || dp.UUID != h.UUID() {
		t.Fatalf("decryption exporting the header: %+v, %v", dp, err)
	}
	same("PlanDecrypt", done)

	// A decryption in progress (header exported): resumed.
	hdr := powercut.New(make([]byte, 4<<20))
	if err := luks2.Decrypt(ctx, hdr, dev, pass, luks2.DecryptOptions{InitOnly: true, Keyslot: reencKDF}); err != nil {
		t.Fatal(err)
	}
	dp, err = luks2.PlanDecrypt(ctx, hdr, dev, luks2.DecryptOptions{})
	if err != nil || !dp.Resume || dp.UUID != h.UUID() {
		t.Fatalf("decryption in progress: %+v, %v", dp, err)
	}
	if err := luks2.Decrypt(ctx, hdr, dev, pass, luks2.DecryptOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := dev.Current()[:len(plain)-2<<20]; !bytes.Equal(got, plain[:len(got)]) {
		t.Fatal("the decrypted device differs from the plaintext")
	}
}
