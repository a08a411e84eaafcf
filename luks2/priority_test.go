package luks2

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
	"github.com/blkcrypt/blkcrypt/kdf"
)

var fastOpts = luksutil.KeyslotOptions{PBKDF: kdf.Options{Type: kdf.PBKDF2, Iterations: 1000}}

func TestPriorities(t *testing.T) {
	dev := luksutil.NewMemDevice(20<<20, nil)
	key := bytes.Repeat([]byte{7}, 64)
	h, err := Format(dev, key, []byte("same"), FormatOptions{Keyslot: fastOpts})
	if err != nil {
		t.Fatal(err)
	}
	// Three keyslots with the same passphrase: which one opens shows the
	// order in which keyslots are tried.
	for i := 0; i < 2; i++ {
		if _, err := h.AddKey(dev, key, []byte("same"), fastOpts); err != nil {
			t.Fatal(err)
		}
	}
	open := func() int {
		_, s, err := h.Unlock(dev, []byte("same"), AnySlot)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := open(); s != 0 {
		t.Fatalf("normal priorities: slot %d", s)
	}
	if err := h.SetPriority(dev, 2, PriorityPrefer); err != nil {
		t.Fatal(err)
	}
	if err := h.SetPriority(dev, 0, PriorityIgnore); err != nil {
		t.Fatal(err)
	}
	h, _ = Read(dev)
	if s := open(); s != 2 {
		t.Fatalf("prefer: slot %d", s)
	}
	if err := h.SetPriority(dev, 2, PriorityIgnore); err != nil {
		t.Fatal(err)
	}
	if s := open(); s != 1 {
		t.Fatalf("ignore: slot %d", s)
	}
	if _, s, err := h.Unlock(dev, []byte("same"), 0); err != nil || s != 0 {
		t.Fatalf("an ignored keyslot still opens when named: %v", err)
	}
	if got := h.Keyslots()[0].Priority; got != PriorityIgnore {
		t.Fatalf("priority %v", got)
	}
	if !bytes.Contains(h.JSON(), []byte(`"priority":0`)) {
		t.Fatalf("JSON lacks the priority: %s", h.JSON())
	}
}

func TestReencryptionRefused(t *testing.T) {
	dir := lukstest.Extract(t, "luks2_valid_hdr.img.xz")
	base, err := os.ReadFile(filepath.Join(dir, "luks2_valid_hdr.img"))
	if err != nil {
		t.Fatal(err)
	}
	m := &vimg{t: t, buf: base}
	m.edit(func(r *jval) {
		s := path(r, "segments", "0")
		s.set("size", jstr("512"))
		o, _ := strconv.ParseUint(s.get("offset").s, 10, 64)
		r.get("segments").set("1", jobj(jmember{"type", jstr("linear")}, jmember{"offset", ju64s(o + 512)}, jmember{"size", jstr("dynamic")}))
	})
	dev := luksutil.NewMemDevice(0, m.buf)
	h, err := Read(dev)
	if err != nil {
		t.Fatalf("two segments must still load: %v", err)
	}
	if _, _, err := h.Unlock(dev, []byte("x"), AnySlot); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("unlock during reencryption: %v", err)
	}
	if err := h.RemoveKey(dev, 0); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("write during reencryption: %v", err)
	}
	t.Logf("refused: %v", h.Reencryption())
}

// TestDuplicateIDsKeepLast: a keyslots section that names keyslot 0 twice
// loads with one keyslot 0, as json-c (cryptsetup) keeps the last value of
// a repeated member; validation_cryptsetup_test.go has cryptsetup judge
// the same kind of header.
func TestDuplicateIDsKeepLast(t *testing.T) {
	dev := luksutil.NewMemDevice(20<<20, nil)
	if _, err := Format(dev, bytes.Repeat([]byte{1}, 64), []byte("p"), FormatOptions{Keyslot: fastOpts}); err != nil {
		t.Fatal(err)
	}
	m := &vimg{t: t, buf: dev.Buf}
	text := marshalMetadata(m.root(0))
	i := bytes.Index(text, []byte(`"keyslots":{"0":`))
	j := bytes.Index(text, []byte(`},"tokens"`))
	ks := text[i+len(`"keyslots":{`) : j]
	dup := append(append(append([]byte{}, text[:j]...), ','), ks...)
	dup = append(dup, text[j:]...)
	m.setText(0, dup, 0x4000)
	m.kill(1)
	mem := luksutil.NewMemDevice(0, m.buf)
	h, err := Read(mem)
	if err != nil {
		t.Fatalf("duplicate keyslot id: %v", err)
	}
	if n := len(h.Keyslots()); n != 1 {
		t.Fatalf("%d keyslots, want 1", n)
	}
	key, _, err := h.Unlock(mem, []byte("p"), AnySlot)
	if err != nil || !bytes.Equal(key, bytes.Repeat([]byte{1}, 64)) {
		t.Fatalf("unlock: %v", err)
	}
}

func TestDetachedHeader(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()
	hdr := lukstest.NewImage(t, dir, "hdr.img", 16<<20)
	data := lukstest.NewImage(t, dir, "data.img", 8<<20)
	key := bytes.Repeat([]byte{9}, 64)
	dev := lukstest.Open(t, hdr)
	h, err := Format(dev, key, []byte("detached"), FormatOptions{Detached: true, Keyslot: fastOpts})
	if err != nil {
		t.Fatal(err)
	}
	if h.DataOffset() != 0 || h.SectorSize() != 512 {
		t.Fatalf("detached: offset %d sector %d", h.DataOffset(), h.SectorSize())
	}
	if _, err := cs.Run("open", "--test-passphrase", "--header", hdr, "--key-file", cs.KeyFile([]byte("detached")), data); err != nil {
		t.Fatalf("cryptsetup refuses the detached header: %v", err)
	}
}
