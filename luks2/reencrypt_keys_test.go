package luks2

import (
	"context"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/powercut"
	"github.com/blkcrypt/blkcrypt/kdf"
)

// keyslotReads counts the reads that touch any of areas.
type keyslotReads struct {
	*powercut.Device
	areas [][2]int64
	n     int
}

func (d *keyslotReads) ReadAt(b []byte, off int64) (int, error) {
	for _, a := range d.areas {
		if off < a[0]+a[1] && off+int64(len(b)) > a[0] {
			d.n++
		}
	}
	return d.Device.ReadAt(b, off)
}

// TestReencryptDerivesOnce: a fresh run reads the old keyslot's material
// once (one derivation, in init) and the new keyslot's never (its key was
// made there), where it derived the old key twice and the new once more.
// With argon2id each derivation is a second or more.
func TestReencryptDerivesOnce(t *testing.T) {
	fast := KeyslotOptions{PBKDF: kdf.Options{Type: kdf.PBKDF2, Hash: "sha256", Iterations: 1000}}
	pass := []byte("derive once")
	dev := &keyslotReads{Device: powercut.New(make([]byte, 5<<20))}
	h, err := Format(dev.Device, make([]byte, 64), pass, FormatOptions{Keyslot: fast, KeyslotsSize: 2 << 20, DataOffset: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	// Every keyslot area the run may use: the whole keyslots area.
	dev.areas = [][2]int64{{int64(2 * h.bin.HdrSize), int64(h.KeyslotsSize())}}
	if err := Reencrypt(context.Background(), dev, pass, ReencryptOptions{Keyslot: fast, Resilience: "none"}); err != nil {
		t.Fatal(err)
	}
	if dev.n != 1 {
		t.Fatalf("%d reads of keyslot material in one run, want 1 (the old key's, derived once)", dev.n)
	}
	// The result opens, with the new key.
	h, err = Read(dev.Device)
	if err != nil {
		t.Fatal(err)
	}
	if h.ReencryptionStatus() != nil {
		t.Fatal("the run did not finish")
	}
	if _, _, err := h.Unlock(dev.Device, pass, AnySlot); err != nil {
		t.Fatalf("after the run: %v", err)
	}
}
