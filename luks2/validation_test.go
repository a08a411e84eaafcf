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
	type tc struct {
		name   string
		accept bool
		mut    func(m *vimg)
	}
	set := func(p []string, v string) func(m *vimg) {
		return func(m *vimg) {
			m.edit(func(r *jval) { path(r, p[:len(p)-1]...).set(p[len(p)-1], parseV(v)) })
		}
	}
	del := func(p ...string) func(m *vimg) {
		return func(m *vimg) { m.edit(func(r *jval) { path(r, p[:len(p)-1]...).del(p[len(p)-1]) }) }
	}
	seg := func(k, v string) func(m *vimg) { return set([]string{"segments", "0", k}, v) }
	cases := []tc{
		{"invalid-checksum-hdr0", true, func(m *vimg) { m.kill(0) }},
		{"invalid-checksum-hdr1", true, func(m *vimg) { m.kill(1) }},
		{"invalid-checksum-both-hdrs", false, func(m *vimg) { m.kill(0); m.kill(1) }},
		{"corrupted-hdr0-with-correct-chks", true, func(m *vimg) {
			m.setText(0, bytes.Repeat([]byte("{garbage"), 12288/8), 0x4000)
		}},
		{"corrupted-hdr1-with-correct-chks", true, func(m *vimg) {
			m.setText(1, bytes.Repeat([]byte("{garbage"), 12288/8), 0x4000)
		}},
		{"correct-full-json0", true, func(m *vimg) {
			r := m.root(0)
			n := 12288 - 1 - len(marshalMetadata(r)) - len(`,"a":""`)
			r.get("config").set("a", jstr(strings.Repeat("x", n)))
			m.setJSON(0, r)
			m.kill(1)
		}},
		{"argon2-leftover-params", true, func(m *vimg) {
			m.edit(func(r *jval) {
				k := path(r, "keyslots", "1", "kdf")
				k.set("type", jstr("pbkdf2"))
				k.set("iterations", jint(1001))
				k.set("hash", jstr("sha256"))
			})
		}},
		{"pbkdf2-leftover-params-0", true, func(m *vimg) {
			m.edit(func(r *jval) {
				k := path(r, "keyslots", "2", "kdf")
				k.set("type", jstr("argon2i"))
				k.set("iterations", jint(1001))
				k.set("hash", jstr("sha256"))
			})
		}},
		{"pbkdf2-leftover-params-1", true, func(m *vimg) {
			m.edit(func(r *jval) {
				k := path(r, "keyslots", "2", "kdf")
				k.set("type", jstr("argon2id"))
				k.set("iterations", jint(1001))
				k.set("hash", jstr("sha256"))
			})
		}},
		{"non-null-byte-beyond-json0", false, func(m *vimg) {
			t := marshalMetadata(m.root(0))
			m.setText(0, append(t, 'X'), 0x4000)
			m.kill(1)
		}},
		{"non-null-bytes-beyond-json0", false, func(m *vimg) {
			t := marshalMetadata(m.root(0))
			t = append(t, make([]byte, 20)...)
			m.setText(0, append(t, "some text"...), 0x4000)
			m.kill(1)
		}},
		{"missing-trailing-null-byte-json0", false, func(m *vimg) {
			r := m.root(0)
			n := 12288 - len(marshalMetadata(r)) - len(`,"a":""`)
			r.get("config").set("a", jstr(strings.Repeat("x", n)))
			m.setJSON(0, r)
			m.kill(1)
		}},
		{"invalid-opening-char-json0", false, func(m *vimg) {
			m.setText(0, append([]byte(" "), marshalMetadata(m.root(0))...), 0x4000)
			m.kill(1)
		}},
		{"invalid-object-type-json0", false, func(m *vimg) {
			m.setText(0, append(append([]byte("["), marshalMetadata(m.root(0))...), ']'), 0x4000)
			m.kill(1)
		}},
		{"overlapping-areas-c0-json0", false, func(m *vimg) {
			m.edit(func(r *jval) { path(r, "keyslots", "7").set("area", path(r, "keyslots", "6", "area").clone()) })
		}},
		{"overlapping-areas-c1-json0", false, func(m *vimg) {
			m.edit(func(r *jval) {
				a6 := path(r, "keyslots", "6", "area")
				o, _ := strconv.ParseUint(a6.get("offset").s, 10, 64)
				s, _ := strconv.ParseUint(a6.get("size").s, 10, 64)
				a7 := path(r, "keyslots", "7", "area")
				a7.set("offset", ju64s(o+1))
				a7.set("size", ju64s(s-1))
			})
		}},
		{"overlapping-areas-c2-json0", false, func(m *vimg) {
			m.edit(func(r *jval) {
				a6 := path(r, "keyslots", "6", "area")
				o, _ := strconv.ParseUint(a6.get("offset").s, 10, 64)
				s, _ := strconv.ParseUint(a6.get("size").s, 10, 64)
				path(r, "keyslots", "7", "area").set("offset", ju64s(o+s-1))
			})
		}},
		{"area-in-json-hdr-space-json0", false, func(m *vimg) {
			m.edit(func(r *jval) {
				a := path(r, "keyslots", "0", "area")
				a.set("offset", ju64s(2*16384-1))
				a.set("size", jstr("1"))
			})
		}},
		{"missing-keyslot-referenced-in-digest", false, func(m *vimg) {
			m.edit(func(r *jval) { a := path(r, "digests", "0", "keyslots"); a.arr = append(a.arr, jstr("8")) })
		}},
		{"missing-segment-referenced-in-digest", false, func(m *vimg) {
			m.edit(func(r *jval) { a := path(r, "digests", "0", "segments"); a.arr = append(a.arr, jstr("1")) })
		}},
		{"missing-keyslot-referenced-in-token", false, set([]string{"tokens", "0"}, `{"type":"dummy","keyslots":["0","8"]}`)},
		{"keyslot-missing-digest", false, func(m *vimg) {
			m.edit(func(r *jval) { a := path(r, "digests", "0", "keyslots"); a.arr = a.arr[1:] })
		}},
		{"keyslot-too-many-digests", false, func(m *vimg) {
			m.edit(func(r *jval) {
				d := path(r, "digests", "0").clone()
				d.set("keyslots", jarrStr("1"))
				r.get("digests").set("1", d)
			})
		}},
		{"uint64-max-segment-size", true, seg("size", `"18446744073709551104"`)},
		{"uint64-overflow-segment-size", false, seg("size", `"18446744073709551616"`)},
		{"uint64-signed-segment-size", false, seg("size", `"-512"`)},
		{"segment-missing-type", false, del("segments", "0", "type")},
		{"segment-wrong-type", false, seg("type", `42`)},
		{"segment-missing-offset", false, del("segments", "0", "offset")},
		{"segment-wrong-offset", false, seg("offset", `"-42"`)},
		{"segment-missing-size", false, del("segments", "0", "size")},
		{"segment-wrong-size-0", false, seg("size", `4096`)},
		{"segment-wrong-size-1", false, seg("size", `"automatic"`)},
		{"segment-wrong-size-2", false, seg("size", `"511"`)},
		{"segment-crypt-missing-encryption", false, del("segments", "0", "encryption")},
		{"segment-crypt-wrong-encryption", false, seg("encryption", `{}`)},
		{"segment-crypt-missing-ivoffset", false, del("segments", "0", "iv_tweak")},
		{"segment-crypt-wrong-ivoffset", false, seg("iv_tweak", `"dynamic"`)},
		{"segment-crypt-missing-sectorsize", false, del("segments", "0", "sector_size")},
		{"segment-crypt-wrong-sectorsize-0", false, seg("sector_size", `1023`)},
		{"segment-crypt-wrong-sectorsize-1", false, seg("sector_size", `"4096"`)},
		{"segment-crypt-wrong-sectorsize-2", false, seg("sector_size", `-1024`)},
		{"segment-unknown-type", true, func(m *vimg) {
			m.edit(func(r *jval) {
				s := path(r, "segments", "0")
				r.get("segments").set("0", jobj(jmember{"type", jstr("some_type")}, jmember{"offset", s.get("offset")},
					jmember{"size", s.get("size")}, jmember{"a_field", jint(0)}))
			})
		}},
		{"segment-two", true, func(m *vimg) {
			m.edit(func(r *jval) {
				s := path(r, "segments", "0")
				s.set("size", jstr("512"))
				o, _ := strconv.ParseUint(s.get("offset").s, 10, 64)
				r.get("segments").set("1", jobj(jmember{"type", jstr("some")}, jmember{"offset", ju64s(o + 512)}, jmember{"size", jstr("dynamic")}))
			})
		}},
		{"segment-wrong-flags", false, seg("flags", `"hello"`)},
		{"segment-wrong-flags-element", false, seg("flags", `["hello", 1]`)},
		{"segment-wrong-backup-key-0", false, set([]string{"segments", "2"}, `{"type":"linear","offset":"512","size":"512","flags":["backup-x"]}`)},
		{"segment-wrong-backup-key-1", false, func(m *vimg) {
			m.edit(func(r *jval) {
				for i := 1; i <= 64; i++ {
					r.get("segments").set(strconv.Itoa(i), parseV(`{"type":"linear","offset":"512","size":"512"}`))
				}
				r.get("segments").set("268435472", parseV(`{"type":"linear","offset":"512","size":"512","flags":["backup-x"]}`))
			})
		}},
		{"segment-crypt-empty-encryption", false, seg("encryption", `""`)},
		{"invalid-keyslots-size-c0", false, set([]string{"config", "keyslots_size"}, `"4165632"`)},
		{"invalid-keyslots-size-c1", false, set([]string{"config", "keyslots_size"}, `"4161535"`)},
		{"invalid-keyslots-size-c2", false, set([]string{"config", "keyslots_size"}, `"4096"`)},
		{"invalid-json-size-c0", false, set([]string{"config", "json_size"}, `"16384"`)},
		{"invalid-json-size-c1", false, set([]string{"config", "json_size"}, `"8192"`)},
		{"invalid-json-size-c2", false, func(m *vimg) {
			text := marshalMetadata(m.root(0))
			m.setText(0, text, 0x8000)
			m.kill(1)
		}},
		{"metadata-size-32k", true, func(m *vimg) { m.resize(0x8000, nil, 1) }},
		{"metadata-size-64k", true, func(m *vimg) { m.resize(0x10000, nil, 1) }},
		{"metadata-size-64k-inv-area-c0", false, func(m *vimg) {
			m.resize(0x10000, func(r *jval) {
				a := path(r, "keyslots", "0", "area")
				o, _ := strconv.ParseUint(a.get("offset").s, 10, 64)
				a.set("offset", ju64s(o-1))
			}, 1)
		}},
		{"metadata-size-64k-inv-area-c1", false, func(m *vimg) {
			m.resize(0x10000, func(r *jval) {
				a := path(r, "keyslots", "7", "area")
				a.set("offset", ju64s(4161536+2*0x10000-131072+1))
			}, 1)
		}},
		{"metadata-size-64k-inv-keyslots-size-c0", false, func(m *vimg) {
			m.resize(0x10000, func(r *jval) {
				r.get("config").set("keyslots_size", ju64s(16777216-2*0x10000+4096))
			}, 1)
		}},
		{"metadata-size-128k", true, func(m *vimg) { m.resize(0x20000, nil, 1) }},
		{"metadata-size-256k", true, func(m *vimg) { m.resize(0x40000, nil, 1) }},
		{"metadata-size-512k", true, func(m *vimg) { m.resize(0x80000, nil, 1) }},
		{"metadata-size-1m", true, func(m *vimg) { m.resize(0x100000, nil, 1) }},
		{"metadata-size-2m", true, func(m *vimg) { m.resize(0x200000, nil, 1) }},
		{"metadata-size-4m", true, func(m *vimg) { m.resize(0x400000, nil, 1) }},
		{"metadata-size-16k-secondary", true, func(m *vimg) { m.kill(0) }},
		{"metadata-size-32k-secondary", true, func(m *vimg) { m.resize(0x8000, nil, 0) }},
		{"metadata-size-64k-secondary", true, func(m *vimg) { m.resize(0x10000, nil, 0) }},
		{"metadata-size-128k-secondary", true, func(m *vimg) { m.resize(0x20000, nil, 0) }},
		{"metadata-size-256k-secondary", true, func(m *vimg) { m.resize(0x40000, nil, 0) }},
		{"metadata-size-512k-secondary", true, func(m *vimg) { m.resize(0x80000, nil, 0) }},
		{"metadata-size-1m-secondary", true, func(m *vimg) { m.resize(0x100000, nil, 0) }},
		{"metadata-size-2m-secondary", true, func(m *vimg) { m.resize(0x200000, nil, 0) }},
		{"metadata-size-4m-secondary", true, func(m *vimg) { m.resize(0x400000, nil, 0) }},
		{"metadata-size-invalid", false, func(m *vimg) {
			m.resize(0x100000, nil, 1)
			binary.BigEndian.PutUint64(m.buf[offHdrSize:], 2048*0x100000)
			m.fixCsum(0, 0x100000)
		}},
		{"metadata-size-invalid-secondary", false, func(m *vimg) {
			m.resize(0x100000, nil, 0)
			binary.BigEndian.PutUint64(m.buf[0x100000+offHdrSize:], 2048*0x100000)
		}},
		{"invalid-tokens", false, set([]string{"tokens"}, `42`)},
		{"invalid-top-objects", false, func(m *vimg) {
			m.edit(func(r *jval) {
				r.set("tokens", jint(42))
				r.set("digests", jint(42))
				r.set("keyslots", parseV(`[]`))
				r.set("segments", jstr("hi"))
			})
		}},
		{"keyslot-invalid-area", false, set([]string{"keyslots", "0", "area"}, `42`)},
		{"keyslot-invalid-area-size", false, set([]string{"keyslots", "0", "area", "size"}, `"18446744073709551615"`)},
		{"keyslot-invalid-objects", false, func(m *vimg) {
			m.edit(func(r *jval) { k := path(r, "keyslots", "0"); k.set("kdf", jint(42)); k.set("af", jint(42)) })
		}},
		{"keyslot-invalid-af", false, set([]string{"keyslots", "0", "af", "type"}, `42`)},
	}
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
