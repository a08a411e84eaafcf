package tcrypt

import (
	"bytes"
	"crypto/cipher"
	stdpbkdf2 "crypto/pbkdf2"
	"crypto/rand"
	"errors"
	"hash"
	"hash/crc32"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/capi"
	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/sector"
)

// The tables restate cryptsetup 2.8's lib/tcrypt/tcrypt.c (tcrypt_kdf and
// tcrypt_cipher) as numbers, so that a change to ours is noticed.
func TestKDFTable(t *testing.T) {
	want := []string{
		"pbkdf2-ripemd160-2000", "pbkdf2-ripemd160-1000", "pbkdf2-sha512-1000", "pbkdf2-whirlpool-1000",
		"pbkdf2-sha1-2000", "pbkdf2-sha512-500000", "pbkdf2-whirlpool-500000", "pbkdf2-sha256-500000",
		"pbkdf2-sha256-200000", "argon2id", "pbkdf2-blake2s-256-500000", "pbkdf2-blake2s-256-200000",
		"pbkdf2-ripemd160-655331", "pbkdf2-ripemd160-327661", "pbkdf2-stribog512-500000",
	}
	if len(KDFs) != len(want) {
		t.Fatalf("%d KDFs, want %d", len(KDFs), len(want))
	}
	for i, k := range KDFs {
		if k.String() != want[i] {
			t.Errorf("KDF %d is %s, want %s", i, k, want[i])
		}
		if k.Legacy != (k.Hash == "sha1") {
			t.Errorf("%s: legacy %v", k, k.Legacy)
		}
		if k.VeraCrypt != (i >= 5) {
			t.Errorf("%s: veracrypt %v", k, k.VeraCrypt)
		}
		if !k.Available() {
			t.Errorf("%s: not available", k)
		}
	}
	for _, c := range []struct {
		kdf       int
		pim       uint32
		iter, mem uint32
	}{
		{7, 0, 500000, 0}, {7, 1234, 15000 + 1234000, 0}, {8, 1234, 2048 * 1234, 0},
		{12, 1, 16000, 0}, {13, 5, 10240, 0},
		{9, 0, 6, 425984}, {9, 8, 5, 1024 * (64 + 7*32)}, {9, 1, 3, 65536}, {9, 31, 13, 1024 * (64 + 30*32)},
		{9, 33, 15, 1 << 20},
		{2, 1234, 1000, 0}, // TrueCrypt derivations ignore the PIM
	} {
		it, mem := KDFs[c.kdf].costs(c.pim)
		if it != c.iter || mem != c.mem {
			t.Errorf("%s with PIM %d: %d iterations, %d KiB; want %d, %d", KDFs[c.kdf], c.pim, it, mem, c.iter, c.mem)
		}
	}
}

func TestChainTable(t *testing.T) {
	type lay struct{ key, iv, size, extra int }
	want := map[string][]lay{
		"aes xts-plain64":                    {{0, 32, 64, 0}},
		"serpent-twofish-aes xts-plain64":    {{0, 96, 64, 0}, {32, 128, 64, 0}, {64, 160, 64, 0}},
		"twofish-aes xts-plain64":            {{0, 64, 64, 0}, {32, 96, 64, 0}},
		"aes lrw-benbi":                      {{32, 0, 48, 0}},
		"aes-twofish-serpent lrw-benbi":      {{32, 0, 48, 0}, {64, 0, 48, 0}, {96, 0, 48, 0}},
		"aes cbc-tcw":                        {{32, 0, 32, 32}},
		"cast5 cbc-tcw":                      {{32, 0, 16, 24}},
		"des3_ede cbc-tcw":                   {{32, 0, 24, 24}},
		"blowfish_le cbc-tcrypt":             {{32, 0, 56, 24}},
		"blowfish_le-aes cbc-tcrypt":         {{32, 0, 56, 0}, {88, 0, 32, 32}},
		"serpent-blowfish_le-aes cbc-tcrypt": {{32, 0, 32, 0}, {64, 0, 56, 0}, {120, 0, 32, 32}},
		"serpent-twofish-aes cbci-tcrypt":    {{32, 0, 32, 0}, {64, 0, 32, 0}, {96, 0, 32, 32}},
	}
	sizes := map[string]int{
		"serpent-twofish-aes xts-plain64": 192, "aes lrw-benbi": 48, "aes cbc-tcw": 64, "cast5 cbc-tcw": 40,
		"des3_ede cbc-tcw": 48, "blowfish_le cbc-tcrypt": 80, "blowfish_le-aes cbc-tcrypt": 120,
		"serpent-blowfish_le-aes cbc-tcrypt": 152, "serpent-twofish-aes cbci-tcrypt": 128,
	}
	if len(Chains) != 36 {
		t.Errorf("%d chains, want cryptsetup's 36", len(Chains))
	}
	for k, ls := range want {
		name, mode, _ := strings.Cut(k, " ")
		c, err := LookupChain(name, mode)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.algs) != len(ls) {
			t.Fatalf("%s: %d ciphers", k, len(c.algs))
		}
		for i, l := range ls {
			a := c.algs[i]
			if (lay{a.keyOffset, a.ivOffset, a.keySize, a.extra}) != l {
				t.Errorf("%s cipher %d (%s): key at %d, iv at %d, %d bytes, extra %d; want %+v", k, i, a.name, a.keyOffset, a.ivOffset, a.keySize, a.extra, l)
			}
		}
		if s, ok := sizes[k]; ok && c.KeySize != s {
			t.Errorf("%s: key size %d, want %d", k, c.KeySize, s)
		}
	}
}

func TestPBKDF2(t *testing.T) {
	for _, h := range []string{"sha1", "sha256", "sha512", "ripemd160", "wp512", "blake2s-256"} {
		f, err := capi.HashFunc(h)
		if err != nil {
			t.Fatal(err)
		}
		for _, pw := range []string{"", "aaaaaaaaaaaa", strings.Repeat("k", 200)} {
			want, err := stdpbkdf2.Key(f, pw, []byte("salt of sixty-four bytes, more or less"), 37, DerivedLen)
			if err != nil {
				t.Fatal(err)
			}
			if got := pbkdf2(f, []byte(pw), []byte("salt of sixty-four bytes, more or less"), 37, DerivedLen); !bytes.Equal(got, want) {
				t.Errorf("%s, password of %d bytes: PBKDF2 differs from crypto/pbkdf2", h, len(pw))
			}
		}
	}
}

// crcBitwise is the CRC-32 register update written out bit by bit.
func crcBitwise(crc uint32, b byte) uint32 {
	crc ^= uint32(b)
	for i := 0; i < 8; i++ {
		if crc&1 != 0 {
			crc = crc>>1 ^ 0xedb88320
		} else {
			crc >>= 1
		}
	}
	return crc
}

func TestSecret(t *testing.T) {
	// Without key files the password is the passphrase.
	s, err := Secret([]byte("abc"), nil, true)
	if err != nil || string(s) != "abc" {
		t.Fatalf("%q %v", s, err)
	}
	if _, err := Secret(make([]byte, 65), nil, false); !errors.Is(err, ErrInvalid) {
		t.Errorf("65-byte TrueCrypt passphrase: %v", err)
	}
	if s, err := Secret(make([]byte, 128), nil, true); err != nil || len(s) != 128 {
		t.Errorf("128-byte VeraCrypt passphrase: %d %v", len(s), err)
	}
	if _, err := Secret(make([]byte, 129), nil, true); !errors.Is(err, ErrInvalid) {
		t.Errorf("129-byte passphrase: %v", err)
	}
	// The pool, computed independently.
	kf1 := []byte("key file one, whose bytes go into the pool as CRC-32 register bytes; it is longer than 64 bytes")
	kf2 := make([]byte, 300)
	rand.Read(kf2)
	for _, c := range []struct {
		pass []byte
		n    int
	}{{nil, 64}, {[]byte("aaaaaaaaaaaa"), 64}, {bytes.Repeat([]byte("p"), 72), 128}} {
		want := make([]byte, c.n)
		for _, kf := range [][]byte{kf1, kf2} {
			crc := ^uint32(0)
			for i, b := range kf {
				crc = crcBitwise(crc, b)
				for j := 0; j < 4; j++ {
					want[(4*i+j)%c.n] += byte(crc >> (24 - 8*j))
				}
			}
		}
		for i, b := range c.pass {
			want[i] += b
		}
		for _, order := range [][][]byte{{kf1, kf2}, {kf2, kf1}} {
			got, err := Secret(c.pass, order, true)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("passphrase of %d bytes: pool differs (%v)", len(c.pass), err)
			}
		}
	}
	// TrueCrypt mode keeps a 64-byte pool even for a long passphrase.
	if _, err := Secret(bytes.Repeat([]byte("p"), 72), [][]byte{kf1}, false); !errors.Is(err, ErrInvalid) {
		t.Errorf("72-byte TrueCrypt passphrase with key files: %v", err)
	}
}

func testFields(vera bool) *Fields {
	f := &Fields{Magic: MagicTrue, Version: 5, VersionTC: 0x0700, VolumeSize: 1 << 20, MKOffset: 131072,
		MKSize: 1 << 20, SectorSize: 512}
	if vera {
		f.Magic, f.VersionTC = MagicVera, 0x010b
	}
	rand.Read(f.Keys[:])
	return f
}

func TestFields(t *testing.T) {
	f := testFields(true)
	d := f.Marshal()
	g, err := ParseFields(d, true)
	if err != nil {
		t.Fatal(err)
	}
	if g.KeysCRC32 != crc32.ChecksumIEEE(f.Keys[:]) {
		t.Error("keys CRC")
	}
	g.KeysCRC32, g.HeaderCRC32 = 0, 0
	if *g != *f {
		t.Errorf("round trip: %+v", g)
	}
	if _, err := ParseFields(d, false); !errors.Is(err, ErrNoHeader) {
		t.Errorf("VERA magic with VeraCrypt disabled: %v", err)
	}
	for _, c := range []struct {
		off  int
		want error
	}{{0, ErrNoHeader}, {50, ErrCorruptHeader}, {300, ErrCorruptHeader}, {190, ErrCorruptHeader}} {
		b := bytes.Clone(d)
		b[c.off] ^= 1
		if _, err := ParseFields(b, true); !errors.Is(err, c.want) {
			t.Errorf("byte %d flipped: %v, want %v", c.off, err, c.want)
		}
	}
	// Header version 3 and older carry no header CRC.
	f.Version = 3
	d = f.Marshal()
	d[190] ^= 1
	d[50] ^= 1
	if _, err := ParseFields(d, true); err != nil {
		t.Errorf("version 3: %v", err)
	}
	// Zero master-key offset and sector size read as 512.
	f.MKOffset, f.SectorSize = 0, 0
	if g, err := ParseFields(f.Marshal(), true); err != nil || g.MKOffset != 512 || g.SectorSize != 512 {
		t.Errorf("defaults: %+v %v", g, err)
	}
	if _, err := ParseFields(d[:447], true); !errors.Is(err, ErrInvalid) {
		t.Errorf("short: %v", err)
	}
}

// encryptHeader is the inverse of Chain.decryptHeader, written from the
// description of the modes (first cipher first).
func encryptHeader(t testing.TB, c *Chain, buf, dk []byte) {
	t.Helper()
	switch c.Mode {
	case ModeXTS, ModeLRW:
		m := c.Mode[:3]
		for _, a := range c.algs {
			iv := make([]byte, 16)
			if m == "lrw" {
				iv[15] = 1
			}
			tfm, err := capi.NewSkcipher(m+"("+a.name+")", a.dmKey(c.Mode, dk))
			if err != nil {
				t.Fatal(err)
			}
			if err := tfm.Encrypt(buf, buf, iv); err != nil {
				t.Fatal(err)
			}
		}
	case ModeTCW, ModeCBCT:
		for _, a := range c.algs {
			b, err := blockCipher(a.name, dk[a.keyOffset:a.keyOffset+a.keySize])
			if err != nil {
				t.Fatal(err)
			}
			cipher.NewCBCEncrypter(b, dk[:a.ivSize]).CryptBlocks(buf, buf)
			removeWhitening(buf, dk)
		}
	case ModeCBCI:
		bs := c.algs[0].ivSize
		iv := bytes.Clone(dk[:bs])
		for i := 0; i < len(buf); i += bs {
			blk := buf[i : i+bs]
			subtle_xor(blk, iv)
			for _, a := range c.algs {
				b, _ := blockCipher(a.name, dk[a.keyOffset:a.keyOffset+a.keySize])
				b.Encrypt(blk, blk)
			}
			copy(iv, blk)
		}
		removeWhitening(buf, dk)
	}
}

// makeHeader builds an encrypted header sector for the passphrase with the
// given derivation (PBKDF2) and chain.
func makeHeader(t testing.TB, pass []byte, k KDF, iter uint32, c *Chain, f *Fields) []byte {
	t.Helper()
	sec := make([]byte, SectorLen)
	rand.Read(sec[:SaltLen])
	hf, err := k.hashFunc()
	if err != nil {
		t.Fatal(err)
	}
	dk := pbkdf2(hf, pass, sec[:SaltLen], iter, DerivedLen)
	copy(sec[SaltLen:], f.Marshal())
	encryptHeader(t, c, sec[SaltLen:], dk)
	return sec
}

// TestSearchEveryChain makes a header with every chain blkcrypt can
// decrypt and finds it, one worker and several.
func TestSearchEveryChain(t *testing.T) {
	k := KDFs[2] // PBKDF2-SHA512, 1000 iterations
	for i := range Chains {
		c := &Chains[i]
		f := testFields(false)
		sec := makeHeaderOrSkip(t, k, c, f)
		if sec == nil {
			continue
		}
		for _, w := range []int{1, 3} {
			h, err := Search(sec, &Options{Passphrase: []byte("pass"), Hash: "sha512", Cipher: c.Name, Workers: w})
			if err != nil {
				t.Errorf("%s-%s, %d workers: %v", c.Name, c.Mode, w, err)
				continue
			}
			if h.Chain.Name != c.Name || h.Chain.Mode != c.Mode || h.KDF.String() != k.String() || h.Keys != f.Keys {
				t.Errorf("%s-%s: found %s-%s with %s", c.Name, c.Mode, h.Chain.Name, h.Chain.Mode, h.KDF)
			}
		}
	}
}

func makeHeaderOrSkip(t *testing.T, k KDF, c *Chain, f *Fields) (sec []byte) {
	for _, a := range c.algs {
		if _, err := blockCipher(a.name, make([]byte, map[bool]int{true: 32, false: a.keySize}[c.Mode == ModeXTS || c.Mode == ModeLRW])); err != nil {
			t.Logf("%s-%s: skipped, %s not available", c.Name, c.Mode, a.name)
			return nil
		}
	}
	return makeHeader(t, []byte("pass"), k, k.Iterations, c, f)
}

func TestSearchOptions(t *testing.T) {
	c, _ := LookupChain("aes", ModeXTS)
	vf := testFields(true)
	vsec := makeHeader(t, []byte("pass"), KDFs[2], 1000, c, vf) // VERA magic, TrueCrypt iterations
	if _, err := Search(vsec, &Options{Passphrase: []byte("pass"), Hash: "sha512"}); err != nil {
		t.Errorf("VeraCrypt: %v", err)
	}
	_, err := Search(vsec, &Options{Passphrase: []byte("pass"), Hash: "sha512", NoVeraCrypt: true})
	if !errors.Is(err, ErrNoHeader) || !errors.Is(err, luksutil.ErrWrongPassphrase) {
		t.Errorf("VeraCrypt disabled: %v", err)
	}
	if _, err := Search(vsec, &Options{Passphrase: []byte("wrong"), Hash: "sha512", Cipher: "aes", Workers: 2}); !errors.Is(err, ErrNoHeader) {
		t.Errorf("wrong passphrase: %v", err)
	}
	if _, err := Search(vsec, &Options{Passphrase: []byte("pass"), Hash: "xxxx"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown hash: %v", err)
	}
	if _, err := Search(vsec, &Options{Passphrase: []byte("pass"), Hash: "sha512", Cipher: "xxx"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown cipher: %v", err)
	}
	// cryptsetup's "stribog" spelling selects PBKDF2-Streebog-512 (a PIM
	// keeps it cheap); it is not this volume's derivation.
	if _, err := Search(vsec, &Options{Passphrase: []byte("pass"), Hash: "stribog", PIM: 1}); !errors.Is(err, ErrNoHeader) || strings.Contains(err.Error(), "not available") {
		t.Errorf("Streebog: %v", err)
	}
	// A PIM leaves out the TrueCrypt derivations.
	if _, err := Search(vsec, &Options{Passphrase: []byte("pass"), Hash: "sha512", PIM: 1, Cipher: "aes"}); !errors.Is(err, ErrNoHeader) {
		t.Errorf("PIM: %v", err)
	}
	// Legacy derivation and chains only when allowed.
	tc, _ := LookupChain("aes", ModeTCW)
	lsec := makeHeader(t, []byte("pass"), KDFs[4], 2000, tc, testFields(false))
	if h, err := Search(lsec, &Options{Passphrase: []byte("pass"), Hash: "sha1"}); err != nil || h.Chain != tc {
		t.Errorf("legacy: %v", err)
	}
	if _, err := Search(lsec, &Options{Passphrase: []byte("pass"), Hash: "sha1", NoLegacy: true}); !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrNoHeader) {
		t.Errorf("legacy disabled: %v", err)
	}
	// A corrupted header (keys CRC) is reported as such.
	bad := testFields(false)
	sec := makeHeader(t, []byte("pass"), KDFs[2], 1000, c, bad)
	dk := pbkdf2(mustHash(t, "sha512"), []byte("pass"), sec[:SaltLen], 1000, DerivedLen)
	d := sec[SaltLen:]
	if err := c.decryptHeader(d, dk); err != nil {
		t.Fatal(err)
	}
	d[keysOff] ^= 1
	encryptHeader(t, c, d, dk)
	if _, err := Search(sec, &Options{Passphrase: []byte("pass"), Hash: "sha512", Cipher: "aes"}); !errors.Is(err, ErrCorruptHeader) {
		t.Errorf("corrupt keys: %v", err)
	}
	// A long passphrase in TrueCrypt mode is refused.
	if _, err := Search(sec, &Options{Passphrase: make([]byte, 65), NoVeraCrypt: true}); !errors.Is(err, ErrInvalid) {
		t.Errorf("65 bytes: %v", err)
	}
	if _, err := Search(sec[:100], &Options{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("short sector: %v", err)
	}
}

func mustHash(t *testing.T, n string) func() hash.Hash {
	f, err := capi.HashFunc(n)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestMappingGeometry checks offsets and sizes against cryptsetup's rules.
func TestMappingGeometry(t *testing.T) {
	xts, _ := LookupChain("serpent-twofish-aes", ModeXTS)
	lrw, _ := LookupChain("aes", ModeLRW)
	cbc, _ := LookupChain("aes", ModeTCW)
	const dev = 1 << 20
	for _, c := range []struct {
		name           string
		chain          *Chain
		version        uint16
		hidden, system bool
		mk, vol, hid   uint64
		g              Geometry
		off, iv, size  uint64
		specs          string
	}{
		{"xts v5", xts, 5, false, false, 131072, 65536, 0, Geometry{dev, dev, false, -1}, 256, 256, 128, "aes,twofish,serpent"},
		{"xts v5 hidden", xts, 5, true, false, 200704, 65536, 32768, Geometry{dev, dev, false, -1}, 392, 392, 64, "aes,twofish,serpent"},
		{"xts v3 hidden", xts, 3, true, false, 512, 65536, 32768, Geometry{dev, dev, false, -1}, (dev - 32768 - 1536) / 512, (dev - 32768 - 1536) / 512, 64, "aes,twofish,serpent"},
		{"lrw", lrw, 2, false, false, 512, 0, 0, Geometry{dev, dev, false, -1}, 1, 0, dev/512 - 1, "aes"},
		{"lrw hidden", lrw, 2, true, false, 512, 0, 16384, Geometry{dev, dev, false, -1}, (dev - 16384 - 1536) / 512, 0, 32, "aes"},
		{"cbc", cbc, 1, false, false, 512, 0, 0, Geometry{dev, dev, false, -1}, 1, 1, dev/512 - 1, "aes"},
		{"cbc hidden", cbc, 2, true, false, 512, 0, 16384, Geometry{dev, dev, false, -1}, (dev - 16384 - 1536) / 512, 1, 32, "aes"},
		{"system, whole image", xts, 5, false, true, 1 << 19, 1 << 18, 0, Geometry{dev, dev, false, -1}, 1024, 1024, 512, "aes,twofish,serpent"},
		{"system, partition", xts, 5, false, true, 1 << 19, 1 << 18, 0, Geometry{dev, 1 << 18, true, 2048}, 0, 2048, 512, "aes,twofish,serpent"},
		{"system, copy", xts, 5, false, true, 1 << 19, 1 << 18, 0, Geometry{dev, 1 << 18, true, -1}, 0, 1024, 512, "aes,twofish,serpent"},
	} {
		h := &Header{Fields: Fields{Version: c.version, MKOffset: c.mk, VolumeSize: c.vol, HiddenVolumeSize: c.hid, SectorSize: 512},
			Chain: c.chain, Hidden: c.hidden, System: c.system}
		rand.Read(h.Keys[:])
		m, err := h.Mapping(c.g)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var specs []string
		for _, l := range m.Layers {
			n, _, _ := strings.Cut(l.Spec, "-")
			specs = append(specs, n)
			if !strings.HasSuffix(l.Spec, "-"+c.chain.Mode) {
				t.Errorf("%s: spec %s", c.name, l.Spec)
			}
		}
		if m.Offset != c.off || m.IVOffset != c.iv || m.Size != c.size || strings.Join(specs, ",") != c.specs {
			t.Errorf("%s: offset %d iv %d size %d layers %v; want %d %d %d %s", c.name, m.Offset, m.IVOffset, m.Size, specs, c.off, c.iv, c.size, c.specs)
		}
		vk := h.VolumeKey()
		if len(vk) != c.chain.KeySize {
			t.Errorf("%s: volume key of %d bytes", c.name, len(vk))
		}
		// The volume key is the layers' keys, first cipher first.
		var cat []byte
		for i := len(m.Layers) - 1; i >= 0; i-- {
			cat = append(cat, m.Layers[i].Key...)
		}
		if !bytes.Equal(cat, vk) {
			t.Errorf("%s: volume key is not the layer keys", c.name)
		}
	}
	// Too small a device, and the legacy modes, are refused.
	h := &Header{Fields: Fields{Version: 5, MKOffset: 131072, VolumeSize: 1 << 20, SectorSize: 512}, Chain: xts}
	if _, err := h.Mapping(Geometry{dev, dev, false, -1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("too small: %v", err)
	}
	for _, n := range []string{"twofish-aes cbci-tcrypt", "blowfish_le cbc-tcrypt"} {
		name, mode, _ := strings.Cut(n, " ")
		h.Chain, _ = LookupChain(name, mode)
		var le *LegacyModeError
		if _, err := h.Mapping(Geometry{dev, dev, false, -1}); !errors.As(err, &le) || !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: %v", n, err)
		}
	}
	h.Chain, h.SectorSize = xts, 4000
	if _, err := h.Mapping(Geometry{dev, dev, false, -1}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("sector size 4000: %v", err)
	}
}

func TestCascade(t *testing.T) {
	c, _ := LookupChain("serpent-twofish-aes", ModeXTS)
	h := &Header{Fields: Fields{Version: 5, MKOffset: 1024, VolumeSize: 8192, SectorSize: 512}, Chain: c}
	rand.Read(h.Keys[:])
	m, err := h.Mapping(Geometry{16384, 16384, false, -1})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := m.Ciphers()
	if err != nil {
		t.Fatal(err)
	}
	cas := &Cascade{Layers: cs}
	plain := make([]byte, 8192)
	rand.Read(plain)
	ct := make([]byte, len(plain))
	if err := cas.EncryptSectors(ct, plain, 0); err != nil {
		t.Fatal(err)
	}
	// By hand: aes (first cipher) encrypts first, serpent (last) last;
	// every layer with IV offset 2.
	want := bytes.Clone(plain)
	for _, a := range c.algs {
		s, err := sector.New(a.name+"-xts-plain64", a.dmKey(c.Mode, h.Keys[:]), sector.Options{IVOffset: 2})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.EncryptSectors(want, want, 0); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(want, ct) {
		t.Error("cascade encryption order differs from serpent, then twofish, then aes")
	}
	back := make([]byte, len(ct))
	if err := cas.DecryptSectors(back, ct, 0); err != nil || !bytes.Equal(back, plain) {
		t.Fatalf("round trip: %v", err)
	}
	// Stacked volumes give the same bytes.
	dev := &memDev{b: make([]byte, 16384)}
	copy(dev.b[1024:], ct)
	v, err := NewVolume(dev, m, false)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(plain))
	if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("stacked volume read: %v", err)
	}
	patch := make([]byte, 1000)
	rand.Read(patch)
	if _, err := v.WriteAt(patch, 100); err != nil {
		t.Fatal(err)
	}
	copy(plain[100:], patch)
	if err := cas.DecryptSectors(back, dev.b[1024:1024+8192], 0); err != nil || !bytes.Equal(back, plain) {
		t.Fatalf("stacked volume write: %v", err)
	}
	if err := v.Close(); err != nil || !dev.closed {
		t.Fatalf("close: %v, device closed %v", err, dev.closed)
	}
}

type memDev struct {
	b      []byte
	closed bool
}

func (m *memDev) ReadAt(p []byte, off int64) (int, error)  { return copy(p, m.b[off:]), nil }
func (m *memDev) WriteAt(p []byte, off int64) (int, error) { return copy(m.b[off:], p), nil }
func (m *memDev) Sync() error                              { return nil }
func (m *memDev) Close() error                             { m.closed = true; return nil }
