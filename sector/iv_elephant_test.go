package sector

// Known answers for elephant come from cryptsetup's BitLocker test images
// (tests/bitlk-images.tar.xz, read from the shared fixtures): the upstream
// images.conf in that archive gives the SHA-256 of each whole decrypted
// volume, and testdata/bitlk_volume_keys.json the volume keys (FVEK ||
// tweak key) that cryptsetup 2.6.1 dumped from them. Nothing in that chain
// was written by us except the few lines below that find the BitLocker
// metadata areas. The aes-cbc-eboiv image is decrypted the same way as a
// control of that harness. A missing fixtures folder or xz fails the test
// under CI and skips it otherwise (internal/testenv).

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// ivFixtureArchive returns the path of an archive in cryptsetup's fixtures
// (BLKCRYPT_FIXTURES, else ../shared/fixtures/cryptsetup beside the repo);
// it or a missing xz fails under CI and skips otherwise.
func ivFixtureArchive(t *testing.T, name string) string {
	t.Helper()
	p := testenv.Fixture(t, name)
	testenv.Need(t, "xz", "xz-utils")
	return p
}

// ivEachTarMember streams a .tar.xz through xz and calls fn for every
// regular member whose base name want accepts.
func ivEachTarMember(t *testing.T, archive string, want func(base string) bool, fn func(name string, r io.Reader)) {
	t.Helper()
	cmd := exec.Command("xz", "-dc", archive)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(out)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", archive, err)
		}
		if h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeGNUSparse {
			continue
		}
		if want(path.Base(h.Name)) {
			fn(path.Base(h.Name), tr)
		}
	}
	_, _ = io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("xz -dc %s: %v", archive, err)
	}
}

// bitlkExpected parses images.conf: image name -> SHA256SUM.
func bitlkExpected(r io.Reader) map[string]string {
	m := map[string]string{}
	sec := ""
	s := bufio.NewScanner(r)
	for s.Scan() {
		l := strings.TrimSpace(s.Text())
		if strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]") {
			sec = l[1 : len(l)-1]
		} else if v, ok := strings.CutPrefix(l, "SHA256SUM="); ok && sec != "" {
			m[sec+".img"] = v
		}
	}
	return m
}

// bitlkDecryptVolume maps a BitLocker (version 2) image as cryptsetup's
// BITLK activation does: the first volume-header-size bytes are the block
// stored at the volume header offset, the three 64 KiB FVE metadata areas
// and the original place of that block read as zeros, and everything else
// decrypts in place; every sector's IV is its physical position.
func bitlkDecryptVolume(t *testing.T, c *Cipher, img []byte) (vol []byte, vhOff, vhSize uint64) {
	t.Helper()
	if !bytes.Equal(img[3:11], []byte("-FVE-FS-")) {
		t.Fatalf("not a BitLocker image: %q", img[3:11])
	}
	var fve [3]uint64
	for i := range fve {
		fve[i] = binary.LittleEndian.Uint64(img[176+8*i:])
	}
	md := img[fve[0]:]
	if !bytes.Equal(md[:8], []byte("-FVE-FS-")) || binary.LittleEndian.Uint16(md[10:]) != 2 {
		t.Fatalf("no version 2 FVE metadata at %d", fve[0])
	}
	vhSize = uint64(binary.LittleEndian.Uint32(md[28:])) * 512 // in sectors
	vhOff = binary.LittleEndian.Uint64(md[56:])
	// The volume header entry (type 0x000f) holds the same offset and size.
	mdSize := uint64(binary.LittleEndian.Uint32(md[64:]))
	found := false
	for p := uint64(112); p+24 <= 64+mdSize; {
		sz := uint64(binary.LittleEndian.Uint16(md[p:]))
		if sz == 0 {
			break
		}
		if binary.LittleEndian.Uint16(md[p+2:]) == 0x000f {
			if binary.LittleEndian.Uint64(md[p+8:]) != vhOff || binary.LittleEndian.Uint64(md[p+16:]) != vhSize {
				t.Fatalf("volume header entry disagrees with the metadata header")
			}
			found = true
		}
		p += sz
	}
	if !found || vhSize == 0 || vhSize%512 != 0 {
		t.Fatalf("volume header: offset %d size %d found %v", vhOff, vhSize, found)
	}
	out := make([]byte, len(img))
	if err := c.DecryptSectors(out[vhSize:], img[vhSize:], vhSize/512); err != nil {
		t.Fatal(err)
	}
	for _, o := range fve {
		clear(out[o : o+64<<10])
	}
	clear(out[vhOff : vhOff+vhSize])
	if err := c.DecryptSectors(out[:vhSize], img[vhOff:vhOff+vhSize], vhOff/512); err != nil {
		t.Fatal(err)
	}
	return out, vhOff, vhSize
}

func TestElephantBitLockerImages(t *testing.T) {
	archive := ivFixtureArchive(t, "bitlk-images.tar.xz")
	raw, err := os.ReadFile("testdata/bitlk_volume_keys.json")
	if err != nil {
		t.Fatal(err)
	}
	var keys struct {
		Entries []struct {
			Image string `json:"image"`
			Key   string `json:"volume_key_hex"`
		} `json:"entries"`
	}
	if err := json.Unmarshal(raw, &keys); err != nil {
		t.Fatal(err)
	}
	key := map[string][]byte{}
	for _, e := range keys.Entries {
		k, err := hex.DecodeString(e.Key)
		if err != nil {
			t.Fatal(err)
		}
		key[path.Base(e.Image)] = k
	}

	got := map[string]string{}
	var want map[string]string
	ivEachTarMember(t, archive, func(b string) bool { return b == "images.conf" || key[b] != nil }, func(name string, r io.Reader) {
		if name == "images.conf" {
			want = bitlkExpected(r)
			return
		}
		img, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		specName := "aes-cbc-eboiv"
		if strings.Contains(name, "elephant") {
			specName = "aes-cbc-elephant"
		}
		spec, err := ParseSpec(specName)
		if err != nil {
			t.Fatalf("%s: ParseSpec(%q): %v", name, specName, err)
		}
		c, err := NewFromSpec(spec, key[name], Options{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		vol, vhOff, vhSize := bitlkDecryptVolume(t, c, img)
		sum := sha256.Sum256(vol)
		got[name] = hex.EncodeToString(sum[:])

		// The write direction must give back BitLocker's ciphertext:
		// encrypt the moved volume header (the NTFS boot area) and the
		// first 4 MiB of data after it again.
		enc := make([]byte, vhSize)
		if err := c.EncryptSectors(enc, vol[:vhSize], vhOff/512); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(enc, img[vhOff:vhOff+vhSize]) {
			t.Errorf("%s: re-encrypting the volume header does not reproduce the image", name)
		}
		// Every other sector the image holds data in, outside the metadata
		// areas. Most of each image is holes (zeros where upstream wiped
		// the ciphertext to make it compress); the volume hash covers their
		// decryption, but only real ciphertext can be re-encrypted.
		zero := make([]byte, 512)
		checked := 0
		for o := vhSize; o < uint64(len(img)); o += 512 {
			if bytes.Equal(img[o:o+512], zero) || bytes.Equal(vol[o:o+512], zero) {
				continue // a hole, or an area the mapping reads as zeros
			}
			if err := c.EncryptSectors(enc[:512], vol[o:o+512], o/512); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(enc[:512], img[o:o+512]) {
				t.Fatalf("%s: re-encrypting sector %d does not reproduce the image", name, o/512)
			}
			checked++
		}
		if checked == 0 {
			t.Errorf("%s: no data sectors to re-encrypt", name)
		}
		t.Logf("%s: %d data sectors re-encrypt to the image", name, checked)
		if bytes.Count(vol[:512], []byte{0}) == 512 {
			t.Errorf("%s: decrypted boot sector is all zeros", name)
		}
	})
	if want == nil {
		t.Fatal("images.conf not found in the archive")
	}
	if len(got) != len(key) {
		t.Fatalf("found %d of the %d images", len(got), len(key))
	}
	for name, sum := range got {
		if want[name] == "" {
			t.Fatalf("%s: no SHA256SUM in images.conf", name)
		}
		if sum != want[name] {
			t.Errorf("%s: decrypted volume SHA-256 %s, images.conf says %s", name, sum, want[name])
		} else {
			t.Logf("%s: decrypted volume matches images.conf SHA-256 %s", name, sum)
		}
	}
}

// newElephantCipher builds "aes-cbc-elephant" through ParseSpec, as
// cryptsetup's BITLK code names it (no IV option): a parser that stops
// accepting it fails every elephant test.
func newElephantCipher(key []byte, opts Options) (*Cipher, error) {
	s, err := ParseSpec("aes-cbc-elephant")
	if err != nil {
		return nil, err
	}
	return NewFromSpec(s, key, opts)
}

func TestElephantSpecParses(t *testing.T) {
	s, err := ParseSpec("aes-cbc-elephant")
	if err != nil {
		t.Fatalf("ParseSpec(\"aes-cbc-elephant\"): %v (dm-crypt takes elephant without an IV option)", err)
	}
	if s.CAPI != "cbc(aes)" || s.IVMode != "elephant" || s.IVOpts != "" {
		t.Fatalf("parsed as %+v", s)
	}
}

func TestElephantDiffusersInvert(t *testing.T) {
	for _, n := range []int{128, 256, 512, 1024} {
		d := make([]uint32, n)
		orig := make([]uint32, n)
		for i := range d {
			var b [4]byte
			_, _ = rand.Read(b[:])
			d[i] = binary.LittleEndian.Uint32(b[:])
		}
		copy(orig, d)
		diffuserAEncrypt(d)
		if equalWords(d, orig) {
			t.Fatalf("n=%d: diffuser A changed nothing", n)
		}
		diffuserBEncrypt(d)
		mid := append([]uint32(nil), d...)
		diffuserBDecrypt(d)
		diffuserADecrypt(d)
		if !equalWords(d, orig) {
			t.Fatalf("n=%d: diffusers do not invert", n)
		}
		// Diffusion: one flipped input bit reaches most output words.
		d[n/2] ^= 1
		diffuserAEncrypt(d)
		diffuserBEncrypt(d)
		diff := 0
		for i := range d {
			if d[i] != mid[i] {
				diff++
			}
		}
		if diff < n*3/4 {
			t.Errorf("n=%d: one bit changed only %d of %d words", n, diff, n)
		}
	}
}

func equalWords(a, b []uint32) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestElephantRoundTripAndKeyLayout(t *testing.T) {
	for _, keyLen := range []int{32, 48, 64} {
		key := make([]byte, keyLen)
		_, _ = rand.Read(key)
		for _, ss := range []int{512, 1024, 4096} {
			for _, large := range []bool{false, true} {
				c, err := newElephantCipher(key, Options{SectorSize: ss, LargeIV: large})
				if err != nil {
					t.Fatalf("key %d sector %d: %v", keyLen, ss, err)
				}
				if got := c.tfms[0].KeySize(); got != keyLen/2 {
					t.Fatalf("data key is %d bytes, want %d", got, keyLen/2)
				}
				plain := make([]byte, 8*ss)
				_, _ = rand.Read(plain)
				ct := make([]byte, len(plain))
				first := uint64(8 * ss / 512)
				if err := c.EncryptSectors(ct, plain, first); err != nil {
					t.Fatal(err)
				}
				inPlace := append([]byte(nil), plain...)
				if err := c.EncryptSectors(inPlace, inPlace, first); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(inPlace, ct) {
					t.Fatal("in-place encryption differs")
				}
				back := make([]byte, len(ct))
				if err := c.DecryptSectors(back, ct, first); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(back, plain) {
					t.Fatalf("key %d sector %d large %v: round trip failed", keyLen, ss, large)
				}
				if err := c.DecryptSectors(ct, ct, first); err != nil || !bytes.Equal(ct, plain) {
					t.Fatalf("in-place decryption failed: %v", err)
				}
			}
		}

		// Against plain eboiv with the same data key: only the diffuser
		// layer differs, so identical plaintext sectors at different
		// positions must encrypt differently and the diffused sector
		// must not be eboiv's.
		el, err := newElephantCipher(key, Options{})
		if err != nil {
			t.Fatal(err)
		}
		eb, err := New("aes-cbc-eboiv", key[:keyLen/2], Options{})
		if err != nil {
			t.Fatal(err)
		}
		p := make([]byte, 512)
		a, b := make([]byte, 512), make([]byte, 512)
		_ = el.EncryptSectors(a, p, 7)
		_ = eb.EncryptSectors(b, p, 7)
		if bytes.Equal(a, b) {
			t.Fatal("elephant equals eboiv")
		}
		// Changing the second key half (the sector key) changes the output,
		// changing nothing else.
		k2 := append([]byte(nil), key...)
		k2[keyLen-1] ^= 1
		el2, err := newElephantCipher(k2, Options{})
		if err != nil {
			t.Fatal(err)
		}
		_ = el2.EncryptSectors(b, p, 7)
		if bytes.Equal(a, b) {
			t.Fatal("the elephant key half has no effect")
		}
		el.Wipe()
	}
}

func TestElephantRejects(t *testing.T) {
	for _, keyLen := range []int{80, 96} { // halves above 32 bytes
		if _, err := newElephantCipher(make([]byte, keyLen), Options{}); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("%d-byte key: %v, want ErrInvalidKey", keyLen, err)
		}
	}
	if _, err := newElephantCipher(make([]byte, 40), Options{}); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("20-byte halves: %v, want ErrInvalidKey", err)
	}
}
