package luks2_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
	"github.com/blkcrypt/blkcrypt/kdf"
	"github.com/blkcrypt/blkcrypt/keyslot"
	"github.com/blkcrypt/blkcrypt/luks2"
)

// fast keeps test keyslots cheap.
var fast = luks2.KeyslotOptions{PBKDF: kdf.Options{Type: kdf.PBKDF2, Iterations: 1000}}

func fixtureKeys(t *testing.T) map[string][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(lukstest.VectorsDir(t), "fixture_volume_keys.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Entries []struct {
			Image   string  `json:"image"`
			Key     *string `json:"volume_key_hex"`
			Unbound *string `json:"unbound_key_hex"`
		} `json:"entries"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	m := map[string][]byte{}
	for _, e := range f.Entries {
		if e.Key != nil {
			m[e.Image], _ = hex.DecodeString(*e.Key)
		}
		if e.Unbound != nil {
			m[e.Image+"#unbound"], _ = hex.DecodeString(*e.Unbound)
		}
	}
	return m
}

func readImage(t *testing.T, path string) (luks2.Device, *luks2.Header) {
	t.Helper()
	dev := lukstest.Open(t, path)
	h, err := luks2.Read(dev)
	if err != nil {
		t.Fatalf("%s: %v", filepath.Base(path), err)
	}
	return dev, h
}

func mustUnlock(t *testing.T, dev luks2.Device, h *luks2.Header, pass string, slot, wantSlot int, want []byte) {
	t.Helper()
	key, got, err := h.Unlock(dev, []byte(pass), slot)
	if err != nil {
		t.Fatalf("unlock %q (slot %d): %v", pass, slot, err)
	}
	if got != wantSlot {
		t.Fatalf("unlock %q opened slot %d, want %d", pass, got, wantSlot)
	}
	if !bytes.Equal(key, want) {
		t.Fatalf("volume key %x, want %x", key, want)
	}
	if !h.VolumeKeyDigestOK(key) {
		t.Fatal("digest check fails for the unlocked key")
	}
	key[0] ^= 1
	if h.VolumeKeyDigestOK(key) {
		t.Fatal("digest check passes for a flipped key")
	}
}

func TestCompatImage2(t *testing.T) {
	keys := fixtureKeys(t)
	dir := lukstest.Extract(t, "compatimage2.img.xz")
	img := filepath.Join(dir, "compatimage2.img")
	dev, h := readImage(t, img)
	if h.UUID() != "28632274-8c8a-493f-835b-da802e1c576b" || h.Cipher() != "aes-cbc-essiv:sha256" ||
		h.KeySize() != 16 || h.DataOffset() != 8192*512 || h.SectorSize() != 512 || h.SeqID() != 9 {
		t.Fatalf("header: %s %s %d %d %d %d", h.UUID(), h.Cipher(), h.KeySize(), h.DataOffset(), h.SectorSize(), h.SeqID())
	}
	if h.MetadataSize() != 16384 || h.KeyslotsSize() != 4161536 {
		t.Fatalf("sizes %d %d", h.MetadataSize(), h.KeyslotsSize())
	}
	vk := keys["compatimage2.img"]
	mustUnlock(t, dev, h, "compatkey", luks2.AnySlot, 0, vk)
	mustUnlock(t, dev, h, "compatkey", 0, 0, vk)
	mustUnlock(t, dev, h, "0123456789abcdef", luks2.AnySlot, 1, vk)
	mustUnlock(t, dev, h, "0123456789abcdef", 1, 1, vk)
	if _, _, err := h.Unlock(dev, []byte("compatkey"), 1); !errors.Is(err, luks2.ErrWrongPassphrase) {
		t.Fatalf("compatkey on slot 1: %v", err)
	}
	if _, _, err := h.Unlock(dev, []byte("wrong"), luks2.AnySlot); !errors.Is(err, luks2.ErrWrongPassphrase) {
		t.Fatalf("wrong passphrase: %v", err)
	}
	// A device holding only the first 8191 sectors is too small.
	short := lukstest.NewImage(t, t.TempDir(), "short.img", 8191*512)
	b, _ := os.ReadFile(img)
	os.WriteFile(short, b[:8191*512], 0o600)
	if _, err := luks2.Read(lukstest.Open(t, short)); !errors.Is(err, luks2.ErrDeviceTooSmall) {
		t.Fatalf("8191-sector copy: %v", err)
	}
}

func TestMDAImages(t *testing.T) {
	keys := fixtureKeys(t)
	dir := lukstest.Extract(t, "luks2_mda_images.tar.xz")
	for i, kib := range []int{16, 32, 64, 128, 256, 512, 1024, 2048, 4096} {
		name := fmt.Sprintf("test_image_%d", kib)
		t.Run(name, func(t *testing.T) {
			img := filepath.Join(dir, name)
			dev, h := readImage(t, img)
			if h.MetadataSize() != uint64(kib)*1024 || h.DataOffset() != 12582912 || h.UUID() != "f453a131-2739-4fbb-af7e-963f442ad433" {
				t.Fatalf("metadata %d offset %d uuid %s", h.MetadataSize(), h.DataOffset(), h.UUID())
			}
			vk := keys["luks2_mda_images/"+name]
			mustUnlock(t, dev, h, "Qx3qn46vq0v", luks2.AnySlot, 0, vk)
			// -short adds key and token to every third image only.
			if i%3 != 0 && testing.Short() {
				return
			}
			// Add keyslot 9 and token 10 as compat-test2 does; cryptsetup
			// checks follow in the interop tests.
			if _, err := h.AddKey(dev, vk, []byte("ocMakf3fAcQO"), luks2.KeyslotOptions{Slot: keyslot.Slot(9), PBKDF: fast.PBKDF}); err != nil {
				t.Fatal(err)
			}
			tok := []byte(`{"type":"some_type","keyslots":[],"base64_data":"zxI7vKB1Qwl4VPB4D-N-OgcC14hPCG0IDu8O7eCqaQ"}`)
			if err := h.SetToken(dev, 10, tok); err != nil {
				t.Fatal(err)
			}
			_, h2 := readImage(t, img)
			mustUnlock(t, dev, h2, "ocMakf3fAcQO", 9, 9, vk)
			mustUnlock(t, dev, h2, "Qx3qn46vq0v", luks2.AnySlot, 0, vk)
			if got := h2.Tokens()[10]; !bytes.Equal(got, tok) {
				t.Fatalf("token 10 reads back as %s", got)
			}
		})
	}
}

func TestKeyslotUnassigned(t *testing.T) {
	keys := fixtureKeys(t)
	dir := lukstest.Extract(t, "luks2_keyslot_unassigned.img.xz")
	dev, h := readImage(t, filepath.Join(dir, "luks2_keyslot_unassigned.img"))
	vk := keys["luks2_keyslot_unassigned.img"]
	mustUnlock(t, dev, h, "compatkey", luks2.AnySlot, 0, vk)
	if _, _, err := h.Unlock(dev, []byte("93R4P4pIqAH8"), 1); !errors.Is(err, luks2.ErrUnbound) {
		t.Fatalf("unbound slot 1 as volume key: %v", err)
	}
	if _, _, err := h.Unlock(dev, []byte("93R4P4pIqAH8"), luks2.AnySlot); !errors.Is(err, luks2.ErrWrongPassphrase) {
		t.Fatalf("unbound passphrase for the volume: %v", err)
	}
	if _, _, err := h.Unlock(dev, []byte("compatkey"), 1); !errors.Is(err, luks2.ErrUnbound) {
		t.Fatalf("compatkey -S1: %v", err)
	}
	for _, slot := range []int{1, luks2.AnySlot} {
		key, got, bound, err := h.UnlockUnbound(dev, []byte("93R4P4pIqAH8"), slot)
		if err != nil || got != 1 || bound || !bytes.Equal(key, keys["luks2_keyslot_unassigned.img#unbound"]) {
			t.Fatalf("unbound unlock: slot %d bound %v key %x err %v", got, bound, key, err)
		}
	}
	if got := h.ActiveKeyslots(); len(got) != 1 || got[0] != 0 {
		t.Fatalf("active keyslots %v", got)
	}
	if err := h.RemoveKey(dev, 0); err != nil {
		t.Fatal(err)
	}
	_, h = readImage(t, filepath.Join(dir, "luks2_keyslot_unassigned.img"))
	if len(h.Keyslots()) != 1 || h.Keyslots()[0].ID != 1 {
		t.Fatalf("keyslots after kill 0: %+v", h.Keyslots())
	}
	if _, got, _, err := h.UnlockUnbound(dev, []byte("93R4P4pIqAH8"), 1); err != nil || got != 1 {
		t.Fatalf("unbound after kill: %v", err)
	}
}

func TestHeaderRequirements(t *testing.T) {
	keys := fixtureKeys(t)
	dir := lukstest.Extract(t, "luks2_header_requirements.tar.xz")
	vk := keys["luks2_header_requirements/luks2_header_requirements"]
	// With unknown requirements: read, unlock, tokens; no writes.
	img := filepath.Join(dir, "luks2_header_requirements")
	dev, h := readImage(t, img)
	if r := h.Requirements(); len(r) != 2 || r[0] != "req0" || r[1] != "req1" {
		t.Fatalf("requirements %v", r)
	}
	if h.Label() != "" || h.Subsystem() != "" {
		t.Fatal("label or subsystem not empty")
	}
	mustUnlock(t, dev, h, "blablabl", luks2.AnySlot, 0, vk)
	if toks := h.Tokens(); len(toks) != 3 || toks[0] == nil || toks[1] == nil || toks[6] == nil {
		t.Fatalf("tokens %v", toks)
	}
	before, _ := os.ReadFile(img)
	for name, op := range map[string]func() error{
		"add":      func() error { _, err := h.AddKey(dev, vk, []byte("x"), fast); return err },
		"change":   func() error { _, err := h.ChangeKey(dev, []byte("blablabl"), []byte("x"), 0, fast); return err },
		"remove":   func() error { return h.RemoveKey(dev, 0) },
		"label":    func() error { return h.SetLabel(dev, "l", "s") },
		"priority": func() error { return h.SetPriority(dev, 0, luks2.PriorityPrefer) },
		"token":    func() error { return h.SetToken(dev, 3, []byte(`{"type":"x","keyslots":[]}`)) },
		"repair":   func() error { return h.Repair(dev) },
	} {
		if err := op(); !errors.Is(err, luks2.ErrReadOnly) {
			t.Errorf("%s with unknown requirements: %v, want ErrReadOnly", name, err)
		}
	}
	if after, _ := os.ReadFile(img); !bytes.Equal(before, after) {
		t.Fatal("a refused write changed the image")
	}
	// Without requirements everything is allowed.
	free := filepath.Join(dir, "luks2_header_requirements_free")
	dev, h = readImage(t, free)
	mustUnlock(t, dev, h, "blablabl", luks2.AnySlot, 0, vk)
	if err := h.SetLabel(dev, "label", "subsys"); err != nil {
		t.Fatal(err)
	}
	_, h = readImage(t, free)
	if h.Label() != "label" || h.Subsystem() != "subsys" || len(h.Tokens()) != 3 {
		t.Fatalf("after relabel: %q %q %d tokens", h.Label(), h.Subsystem(), len(h.Tokens()))
	}
}

func TestValidHdr(t *testing.T) {
	dir := lukstest.Extract(t, "luks2_valid_hdr.img.xz")
	dev, h := readImage(t, filepath.Join(dir, "luks2_valid_hdr.img"))
	if h.UUID() != "12a3a118-7039-4575-a649-3f559d8d87ee" || h.SeqID() != 10 || len(h.Keyslots()) != 8 {
		t.Fatalf("uuid %s seqid %d keyslots %d", h.UUID(), h.SeqID(), len(h.Keyslots()))
	}
	if h.Keyslots()[0].KDF.Type != "argon2" {
		t.Fatalf("kdf %q", h.Keyslots()[0].KDF.Type)
	}
	// The legacy "argon2" kdf type cannot be opened (cryptsetup: EINVAL).
	if _, _, err := h.Unlock(dev, []byte("x"), luks2.AnySlot); !errors.Is(err, luks2.ErrUnsupported) {
		t.Fatalf("unlock legacy argon2: %v", err)
	}
}

func TestInvalidCipherImage(t *testing.T) {
	keys := fixtureKeys(t)
	dir := lukstest.Extract(t, "luks2_invalid_cipher.img.xz")
	dev, h := readImage(t, filepath.Join(dir, "luks2_invalid_cipher.img"))
	t.Logf("cipher %q", h.Cipher())
	key, _, err := h.Unlock(dev, []byte("93R4P4pIqAH8"), luks2.AnySlot)
	if err != nil {
		t.Logf("unlock: %v", err)
		return
	}
	if !bytes.Equal(key, keys["luks2_invalid_cipher.img"]) {
		t.Fatalf("key %x", key)
	}
}
