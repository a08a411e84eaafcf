package luks2

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
)

// vimg is luks2_valid_hdr.img in memory, with helpers to edit one copy's
// JSON or binary header the way cryptsetup's luks2-validation-test
// generators do (the checksum is recomputed unless a case breaks it).
type vimg struct {
	t   *testing.T
	buf []byte
}

func (m *vimg) hdrSize(c int) uint64 {
	off := uint64(0)
	if c == 1 {
		off = binary.BigEndian.Uint64(m.buf[offHdrSize:])
	}
	return binary.BigEndian.Uint64(m.buf[off+offHdrSize:])
}

func (m *vimg) off(c int) uint64 {
	if c == 0 {
		return 0
	}
	return binary.BigEndian.Uint64(m.buf[offHdrSize:])
}

func (m *vimg) root(c int) *jval {
	off := m.off(c)
	area := m.buf[off+BinHeaderSize : off+m.hdrSize(c)]
	v, _, err := parseJSONArea(area)
	if err != nil {
		m.t.Fatal(err)
	}
	return v
}

// setArea writes raw JSON text (NUL padded) into copy c's area of size
// jsonSize, and fixes the checksum.
func (m *vimg) setText(c int, text []byte, hdrSize uint64) {
	off := m.off(c)
	if c == 1 {
		off = hdrSize
	}
	area := make([]byte, hdrSize-BinHeaderSize)
	copy(area, text)
	copy(m.buf[off+BinHeaderSize:], area)
	binary.BigEndian.PutUint64(m.buf[off+offHdrSize:], hdrSize)
	binary.BigEndian.PutUint64(m.buf[off+offHdrOffset:], off)
	m.fixCsum(c, hdrSize)
}

func (m *vimg) fixCsum(c int, hdrSize uint64) {
	off := uint64(0)
	if c == 1 {
		off = hdrSize
	}
	bin := m.buf[off : off+BinHeaderSize]
	sum, err := checksum("sha256", bin, m.buf[off+BinHeaderSize:off+hdrSize])
	if err != nil {
		m.t.Fatal(err)
	}
	clear(bin[offCsum : offCsum+ChecksumLen])
	copy(bin[offCsum:], sum)
}

func (m *vimg) setJSON(c int, root *jval) {
	m.setText(c, marshalMetadata(root), m.hdrSize(c))
}

// kill breaks copy c's checksum so the other copy decides.
func (m *vimg) kill(c int) { m.buf[m.off(c)+offCsum] ^= 0xff }

// edit applies f to the primary JSON and kills the secondary.
func (m *vimg) edit(f func(r *jval)) {
	r := m.root(0)
	f(r)
	m.setJSON(0, r)
	m.kill(1)
}

func path(r *jval, keys ...string) *jval {
	for _, k := range keys {
		r = r.get(k)
	}
	return r
}

func parseV(s string) *jval {
	v, err := parseJSON([]byte(s))
	if err != nil {
		panic(err)
	}
	return v
}

// resize rewrites both copies for metadata size s (areas shifted, data at
// 16 MiB) like the metadata-size generators; tweak may edit the JSON.
func (m *vimg) resize(s uint64, tweak func(r *jval), killWhich int) {
	r := m.root(0)
	shift := 2 * (s - 0x4000)
	for _, k := range r.get("keyslots").obj {
		a := k.val.get("area")
		o, _ := strconv.ParseUint(a.get("offset").s, 10, 64)
		a.set("offset", ju64s(o+shift))
	}
	r.get("config").set("json_size", ju64s(s-BinHeaderSize))
	path(r, "segments", "0").set("offset", jstr("16777216"))
	if tweak != nil {
		tweak(r)
	}
	text := marshalMetadata(r)
	clear(m.buf[:2*s])
	for c := 0; c < 2; c++ {
		off := uint64(0)
		magic := MagicPrimary
		if c == 1 {
			off, magic = s, MagicSecondary
		}
		b := BinHeader{Magic: magic, Version: 2, HdrSize: s, SeqID: 1, ChecksumAlg: "sha256", UUID: "12a3a118-7039-4575-a649-3f559d8d87ee", HdrOffset: off}
		copy(m.buf[off:], b.Marshal())
		m.setText(c, text, s)
	}
	if killWhich >= 0 {
		m.kill(killWhich)
	}
}

func TestLUKS2ValidationCases(t *testing.T) {
	dir := lukstest.Extract(t, "luks2_valid_hdr.img.xz")
	base, err := os.ReadFile(filepath.Join(dir, "luks2_valid_hdr.img"))
	if err != nil {
		t.Fatal(err)
	}
	// The table is shared with the cryptsetup comparison
	// (validation_cryptsetup_test.go).
	cases := validationLoadCases()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := &vimg{t: t, buf: append([]byte(nil), base...)}
			c.mut(m)
			_, err := Read(luksutil.NewMemDevice(0, m.buf))
			if c.accept && err != nil {
				t.Fatalf("valid case refused: %v", err)
			}
			if !c.accept {
				if err == nil {
					t.Fatal("invalid case accepted")
				}
				if !errors.Is(err, ErrCorruptHeader) && !errors.Is(err, ErrNotLUKS) {
					t.Fatalf("refused with an unexpected error: %v", err)
				}
				t.Logf("refused: %v", err)
			}
		})
	}
	// Non-compact token JSON: removing the token must work and the header
	// must still load.
	for _, pad := range []bool{false, true} {
		m := &vimg{t: t, buf: append([]byte(nil), base...)}
		r := m.root(0)
		text := marshalMetadata(r)
		text = bytes.Replace(text, []byte(`"tokens":{}`), []byte(`"tokens":{"0":{"type": "a","keyslots":[]}}`), 1)
		if pad {
			text = bytes.Replace(text, []byte(`"type": "a"`), []byte(`"type": `+strings.Repeat(" ", 4096-len(text)%4096)+`"a"`), 1)
		}
		m.setText(0, text, 0x4000)
		m.setText(1, text, 0x4000)
		dev := luksutil.NewMemDevice(0, m.buf)
		h, err := Read(dev)
		if err != nil {
			t.Fatalf("non-compact token: %v", err)
		}
		if len(h.Tokens()) != 1 {
			t.Fatal("token missing")
		}
		// The legacy argon2 keyslots are fine to keep; the token goes.
		if err := h.RemoveToken(dev, 0); err != nil {
			t.Fatalf("remove token: %v", err)
		}
		h, err = Read(dev)
		if err != nil || len(h.Tokens()) != 0 {
			t.Fatalf("after token removal: %v, %d tokens", err, len(h.Tokens()))
		}
	}
}
