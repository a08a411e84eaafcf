package fvault2

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// fvault2Image unpacks cryptsetup's fvault2-images.tar.xz ($BLKCRYPT_FIXTURES
// or ../shared/fixtures/cryptsetup beside the repository; a missing archive
// or xz fails under CI and skips otherwise) and returns the path of its
// image "small".
func fvault2Image(t testing.TB) string {
	t.Helper()
	src := testenv.Fixture(t, "fvault2-images.tar.xz")
	testenv.Need(t, "xz", "xz-utils")
	dst := t.TempDir()
	if out, err := exec.Command("tar", "-xJf", src, "-C", dst).CombinedOutput(); err != nil {
		t.Fatalf("untar: %v %s", err, out)
	}
	return filepath.Join(dst, "fvault2-images", "small")
}

// The expected values are those of cryptsetup's fvault2-compat-test.
const (
	wantPVUUID  = "fc52bfae-5a1f-4f9b-b3a6-f33303a0e401"
	wantFamily  = "33a76caa-1481-4bc5-8d04-1ac1707c19c0"
	wantOffset  = 67108864
	wantSize    = 167772160
	wantIters   = 204222
	wantSalt    = "2c249edb6663d6fbcc7905b7a4d72752"
	wantKey     = "20734d3389212774d7610c29d732880916f3be14c4b12ac7aaf07e5ccc77b319"
	wantSHA256  = "2c662e36c0f7e2f5583e6a939bbcbdc660805692d0fccaa45ad4052beb3b8e18"
	fixturePass = "heslo123"
)

func TestFixtureImage(t *testing.T) {
	img := fvault2Image(t)
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := Read(f)
	if err != nil {
		t.Fatal(err)
	}
	if m.PhysicalVolumeUUID != wantPVUUID || m.FamilyUUID != wantFamily || m.LogicalVolumeOffset != wantOffset ||
		m.LogicalVolumeSize != wantSize || m.PBKDF2Iterations != wantIters || hex.EncodeToString(m.PBKDF2Salt[:]) != wantSalt ||
		m.CipherSpec() != "aes-xts-plain64" {
		t.Fatalf("metadata %+v", m)
	}
	if _, err := m.VolumeKey([]byte("heslo124")); !errors.Is(err, ErrWrongPassphrase) {
		t.Fatalf("wrong passphrase: %v", err)
	}
	key, err := m.VolumeKey([]byte(fixturePass))
	if err != nil {
		t.Fatal(err)
	}
	if hex.EncodeToString(key) != wantKey {
		t.Fatalf("volume key %x", key)
	}
	var dump bytes.Buffer
	Dump(&dump, m, "small", key)
	for _, l := range []string{
		"Header information for FVAULT2 device small.\n",
		"Physical volume UUID: \t" + wantPVUUID + "\n",
		"Family UUID:          \t" + wantFamily + "\n",
		"Logical volume offset:\t67108864 [bytes]\n",
		"Logical volume size:  \t167772160 [bytes]\n",
		"PBKDF2 iterations:    \t204222\n",
		"PBKDF2 salt:          \t2c 24 9e db 66 63 d6 fb cc 79 05 b7 a4 d7 27 52 \n",
		"Volume key:       \t20 73 4d 33 ",
	} {
		if !strings.Contains(dump.String(), l) {
			t.Errorf("dump lacks %q:\n%s", l, dump.String())
		}
	}

	v, err := OpenFile(img, []byte(fixturePass), true)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(v, 0, v.Size())); err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != wantSHA256 || v.Size() != wantSize {
		t.Fatalf("logical volume: %d bytes, SHA-256 %s", v.Size(), got)
	}
	if _, err := OpenFile(img, []byte("wrong"), true); !errors.Is(err, ErrWrongPassphrase) {
		t.Fatalf("OpenFile with a wrong passphrase: %v", err)
	}
}

// TestFixtureDamage: a changed byte in any checksummed structure is found.
func TestFixtureDamage(t *testing.T) {
	img := fvault2Image(t)
	raw, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	if !Detect(raw[:64<<10]) {
		t.Fatal("fixture not detected")
	}
	m, err := Read(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	// Where the encrypted metadata is: disk label block (header offset
	// 104) → volume groups descriptor (label offset 220) → first block.
	le := binary.LittleEndian
	bs := int(m.BlockSize)
	label := int(le.Uint64(raw[104:])) * bs
	vgd := label + int(le.Uint32(raw[label+220:]))
	enc := int(le.Uint64(raw[vgd+32:])) * bs
	head := raw[:enc+(1<<20)]
	if _, err := Read(bytes.NewReader(head)); err != nil {
		t.Fatalf("undamaged head: %v", err)
	}
	// The volume header, the disk label (block 1) and the first encrypted
	// metadata block.
	for _, off := range []int{100, 176, label + 300, enc + 100, enc + 3*mdBlockSize + 5} {
		bad := append([]byte(nil), head...)
		bad[off] ^= 0x40
		if _, err := Read(bytes.NewReader(bad)); err == nil {
			t.Errorf("byte %d changed: accepted", off)
		}
	}
	if Detect(make([]byte, 512)) {
		t.Error("zeros detected as Core Storage")
	}
	if _, err := Read(bytes.NewReader(make([]byte, 4096))); !errors.Is(err, ErrNotFileVault) {
		t.Errorf("zeros: %v", err)
	}
}
