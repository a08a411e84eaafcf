package luks2

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/powercut"
	"github.com/blkcrypt/blkcrypt/kdf"
	"github.com/blkcrypt/blkcrypt/sector"
)

// TestReencryptDigestGuardsMetadata: a change to anything the
// reencryption digest covers (resilience hash, direction-independent
// keyslot fields, either backup segment) makes the resume refuse, naming the
// digest, and write nothing; the untouched state resumes.
func TestReencryptDigestGuardsMetadata(t *testing.T) {
	fast := KeyslotOptions{PBKDF: kdf.Options{Type: kdf.PBKDF2, Hash: "sha256", Iterations: 1000}}
	pass := []byte("guarded")
	base := make([]byte, 5<<20)
	dev := powercut.New(base)
	key := make([]byte, 64)
	if _, err := Format(dev, key, pass, FormatOptions{Keyslot: fast, KeyslotsSize: 2 << 20, DataOffset: 4 << 20}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := Reencrypt(ctx, dev, pass, ReencryptOptions{InitOnly: true, Keyslot: fast}); err != nil {
		t.Fatal(err)
	}
	initState := dev.Current()
	for _, tc := range []struct {
		name string
		edit func(root *jval)
	}{
		{"checksum hash", func(root *jval) {
			for _, m := range root.get("keyslots").obj {
				if jsGet(m.val, "type") == "reencrypt" {
					m.val.get("area").set("hash", jstr("sha512"))
				}
			}
		}},
		{"checksum block", func(root *jval) {
			for _, m := range root.get("keyslots").obj {
				if jsGet(m.val, "type") == "reencrypt" {
					m.val.get("area").set("sector_size", jint(512))
				}
			}
		}},
		{"new cipher", func(root *jval) {
			for _, m := range root.get("segments").obj {
				if contains1(flagsOf(m.val), flagFinal) {
					m.val.set("encryption", jstr("serpent-xts-plain64"))
				}
			}
		}},
		{"old cipher", func(root *jval) {
			for _, m := range root.get("segments").obj {
				if contains1(flagsOf(m.val), flagPrevious) {
					m.val.set("encryption", jstr("aes-xts-plain"))
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := powercut.New(initState)
			h, err := Read(d)
			if err != nil {
				t.Fatal(err)
			}
			root := h.md.root.clone()
			tc.edit(root)
			root.raw = nil
			for _, sec := range []string{"keyslots", "segments"} {
				root.get(sec).raw = nil
				for _, m := range root.get(sec).obj {
					m.val.raw = nil
					if a := m.val.get("area"); a != nil {
						a.raw = nil
					}
				}
			}
			if err := h.commit(d, root); err != nil {
				t.Fatalf("writing the edited metadata: %v", err)
			}
			before := d.Current()
			err = Reencrypt(ctx, d, pass, ReencryptOptions{ResumeOnly: true, Keyslot: fast})
			if err == nil || !errors.Is(err, ErrCorruptHeader) || !strings.Contains(err.Error(), "digest") {
				t.Fatalf("resume of edited metadata: %v", err)
			}
			if string(d.Current()) != string(before) {
				t.Fatal("a refused resume wrote to the device")
			}
		})
	}
	d := powercut.New(initState)
	if err := Reencrypt(ctx, d, pass, ReencryptOptions{ResumeOnly: true, Keyslot: fast}); err != nil {
		t.Fatalf("the untouched state does not resume: %v", err)
	}
}

// TestReencryptFinishWithoutOldKey: the state cryptsetup leaves when it
// dies between removing the old keyslots and the reencryption metadata
// (all data under the new key, no old keyslot) is finished with the new
// key alone, and the data reads back.
func TestReencryptFinishWithoutOldKey(t *testing.T) {
	fast := KeyslotOptions{PBKDF: kdf.Options{Type: kdf.PBKDF2, Hash: "sha256", Iterations: 1000}}
	pass := []byte("no old key")
	dev := powercut.New(make([]byte, 5<<20))
	key := make([]byte, 64)
	h, err := Format(dev, key, pass, FormatOptions{Keyslot: fast, KeyslotsSize: 2 << 20, DataOffset: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	plain := make([]byte, 1<<20)
	for i := range plain {
		plain[i] = byte(i * 7)
	}
	c, err := sector.New(h.Cipher(), key, sector.Options{SectorSize: h.SectorSize()})
	if err != nil {
		t.Fatal(err)
	}
	ct := make([]byte, len(plain))
	c.EncryptSectors(ct, plain, 0)
	dev.WriteAt(ct, 4<<20)
	stopBeforeFinish = true
	err = Reencrypt(context.Background(), dev, pass, ReencryptOptions{Keyslot: fast, HotzoneSize: 256 << 10})
	stopBeforeFinish = false
	if err != nil {
		t.Fatal(err)
	}
	// Drop the old keyslot as cryptsetup's finish does first.
	h, err = Read(dev)
	if err != nil {
		t.Fatal(err)
	}
	root := h.md.root.clone()
	root.get("keyslots").del("0")
	dropKeyslotRefs(root, "0")
	if err := h.commit(dev, root); err != nil {
		t.Fatal(err)
	}
	if err := Reencrypt(context.Background(), dev, pass, ReencryptOptions{ResumeOnly: true, Keyslot: fast}); err != nil {
		t.Fatalf("finishing without the old key: %v", err)
	}
	h, err = Read(dev)
	if err != nil {
		t.Fatal(err)
	}
	if h.ReencryptionStatus() != nil || len(h.Segments()) != 1 || len(h.Requirements()) != 0 {
		t.Fatalf("not finished: %d segments, requirements %v", len(h.Segments()), h.Requirements())
	}
	nk, _, err := h.Unlock(dev, pass, AnySlot)
	if err != nil {
		t.Fatal(err)
	}
	nc, _ := sector.New(h.Cipher(), nk, sector.Options{SectorSize: h.SectorSize()})
	got := make([]byte, len(plain))
	dev.ReadAt(got, 4<<20)
	nc.DecryptSectors(got, got, 0)
	if string(got) != string(plain) {
		t.Fatal("plaintext differs")
	}
}
