package luks1_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
	"github.com/blkcrypt/blkcrypt/luks1"
	"github.com/blkcrypt/blkcrypt/sector"
)

// fixtureKeys reads shared/vectors/fixture_volume_keys.json.
func fixtureKeys(t *testing.T) map[string][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(lukstest.VectorsDir(t), "fixture_volume_keys.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Entries []struct {
			Image string  `json:"image"`
			Key   *string `json:"volume_key_hex"`
		} `json:"entries"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	m := map[string][]byte{}
	for _, e := range f.Entries {
		if e.Key != nil {
			k, _ := hex.DecodeString(*e.Key)
			m[e.Image] = k
		}
	}
	return m
}

func openImage(t *testing.T, path string) (luks1.Device, *luks1.Header) {
	t.Helper()
	dev := lukstest.Open(t, path)
	h, err := luks1.Read(dev)
	if err != nil {
		t.Fatalf("%s: %v", filepath.Base(path), err)
	}
	return dev, h
}

// decryptFirstSector returns the first decrypted payload sector. Every
// cipher of cryptsetup's fixtures is one we implement, so a refusal fails.
func decryptFirstSector(t *testing.T, dev luks1.Device, h *luks1.Header, key []byte) []byte {
	t.Helper()
	c, err := sector.New(h.Cipher(), key, sector.Options{SectorSize: 512})
	if err != nil {
		t.Fatalf("data cipher %s: %v", h.Cipher(), err)
	}
	defer c.Wipe()
	buf := make([]byte, 512)
	if _, err := dev.ReadAt(buf, h.DataOffset()); err != nil {
		t.Fatal(err)
	}
	if err := c.DecryptSectors(buf, buf, 0); err != nil {
		t.Fatal(err)
	}
	return buf
}

func TestCompatImages(t *testing.T) {
	keys := fixtureKeys(t)
	for _, tc := range []struct {
		img, cipher, hash, uuid string
		keyBytes                int
		payload                 int64
	}{
		{"compatimage.img", "aes-cbc-essiv:sha256", "sha256", "28632274-8c8a-493f-835b-da802e1c576b", 16, 1032 * 512},
		{"compatv10image.img", "aes-cbc-plain", "sha1", "e0d6124b-f9b7-4592-8c27-5adaddb7f1a4", 16, 1010 * 512},
	} {
		t.Run(tc.img, func(t *testing.T) {
			dir := lukstest.Extract(t, tc.img+".xz")
			dev, h := openImage(t, filepath.Join(dir, tc.img))
			if h.Cipher() != tc.cipher || h.Hash() != tc.hash || h.UUID() != tc.uuid || h.KeySize() != tc.keyBytes || h.DataOffset() != tc.payload {
				t.Fatalf("header: cipher %s hash %s uuid %s key %d offset %d", h.Cipher(), h.Hash(), h.UUID(), h.KeySize(), h.DataOffset())
			}
			if got := h.ActiveKeyslots(); len(got) != 1 || got[0] != 0 {
				t.Fatalf("active keyslots %v, want [0]", got)
			}
			key, slot, err := h.Unlock(dev, []byte("compatkey"), luks1.AnySlot)
			if err != nil || slot != 0 {
				t.Fatalf("unlock: slot %d, %v", slot, err)
			}
			if !bytes.Equal(key, keys[tc.img]) {
				t.Fatalf("volume key %x, want %x", key, keys[tc.img])
			}
			if !h.VolumeKeyDigestOK(key) {
				t.Fatal("digest check failed for the right key")
			}
			key[3] ^= 1
			if h.VolumeKeyDigestOK(key) {
				t.Fatal("digest check passed for a flipped key")
			}
			if _, _, err := h.Unlock(dev, []byte("rUkL4RUryBom"), luks1.AnySlot); !errors.Is(err, luks1.ErrWrongPassphrase) {
				t.Fatalf("wrong passphrase: %v", err)
			}
			if _, _, err := h.Unlock(dev, []byte("compatkey"), 1); !errors.Is(err, luks1.ErrSlotInactive) {
				t.Fatalf("inactive slot: %v", err)
			}
		})
	}
}

// The twelve luks1-images: every one must parse and open with keyfile1.
// Where the volume key is known it must match; for every image the first
// payload sector must decrypt to a FAT boot sector with serial DEAD-BABE
// (when this build has the data cipher).
func TestLUKS1Images(t *testing.T) {
	keys := fixtureKeys(t)
	dir := filepath.Join(lukstest.Extract(t, "luks1-images.tar.xz"), "luks1-images")
	pass, err := os.ReadFile(filepath.Join(dir, "keyfile1"))
	if err != nil {
		t.Fatal(err)
	}
	imgs, _ := filepath.Glob(filepath.Join(dir, "*.img"))
	if len(imgs) != 12 {
		t.Fatalf("found %d images, want 12", len(imgs))
	}
	for _, img := range imgs {
		name := filepath.Base(img)
		t.Run(name, func(t *testing.T) {
			dev, h := openImage(t, img)
			parts := strings.Split(strings.TrimSuffix(strings.TrimPrefix(name, "luks1_"), ".img"), "-")
			if !strings.HasPrefix(h.Cipher(), parts[0]+"-"+parts[1]) || h.Hash() != parts[len(parts)-1] {
				t.Fatalf("cipher %s hash %s do not match the file name", h.Cipher(), h.Hash())
			}
			if h.KeySize() != 32 || h.DataOffset() != 4096*512 {
				t.Fatalf("key %d offset %d", h.KeySize(), h.DataOffset())
			}
			key, slot, err := h.Unlock(dev, pass, luks1.AnySlot)
			if err != nil || slot != 0 {
				t.Fatalf("unlock: slot %d: %v", slot, err)
			}
			if want, ok := keys["luks1-images/"+name]; ok && !bytes.Equal(key, want) {
				t.Fatalf("volume key %x, want %x", key, want)
			}
			bs := decryptFirstSector(t, dev, h, key)
			if bs[510] != 0x55 || bs[511] != 0xaa {
				t.Fatalf("payload sector 0 is not a boot sector: %x", bs[500:])
			}
			serial := []byte{0xbe, 0xba, 0xad, 0xde}
			if !bytes.Equal(bs[0x27:0x2b], serial) && !bytes.Equal(bs[0x43:0x47], serial) {
				t.Fatalf("FAT serial is not DEAD-BABE: %x / %x", bs[0x27:0x2b], bs[0x43:0x47])
			}
		})
	}
}

func TestValidHeaderFile(t *testing.T) {
	keys := fixtureKeys(t)
	dir := lukstest.Extract(t, "valid_header_file.xz")
	dev, h := openImage(t, filepath.Join(dir, "valid_header_file"))
	if len(h.ActiveKeyslots()) != 0 || h.Hash() != "sha512" || h.DataOffset() != 4096*512 {
		t.Fatalf("unexpected header: %v %s %d", h.ActiveKeyslots(), h.Hash(), h.DataOffset())
	}
	for i, want := range []uint32{8, 264, 520, 776, 1032, 1288, 1544, 1800} {
		ks, _ := h.Keyslot(i)
		if ks.KeyMaterialOffset != want || ks.Stripes != 4000 {
			t.Fatalf("keyslot %d: %+v", i, ks)
		}
	}
	if !h.VolumeKeyDigestOK(keys["valid_header_file"]) {
		t.Fatal("known volume key does not verify")
	}
	if _, _, err := h.Unlock(dev, []byte("anything"), luks1.AnySlot); !errors.Is(err, luks1.ErrWrongPassphrase) {
		t.Fatalf("unlock without keyslots: %v", err)
	}
}

func TestEvilHeaders(t *testing.T) {
	for _, tc := range []struct {
		name string
		want error
	}{
		{"evil_hdr-luks_hdr_damage", luks1.ErrCorruptHeader},
		{"evil_hdr-payload_overwrite", luks1.ErrCorruptHeader},
		{"evil_hdr-stripes_payload_dmg", luks1.ErrCorruptHeader},
		{"evil_hdr-small_luks_device", luks1.ErrDeviceTooSmall},
		{"evil_hdr-keyslot_overlap", luks1.ErrCorruptHeader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := lukstest.Extract(t, tc.name+".xz")
			dev := lukstest.Open(t, filepath.Join(dir, tc.name))
			_, err := luks1.Read(dev)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Read: %v, want %v", err, tc.want)
			}
			t.Logf("refused: %v", err)
		})
	}
}
