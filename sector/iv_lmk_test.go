package sector

// Known answers for lmk (testdata/lmk_aespipe.json) were made with aespipe
// 2.4d, Jari Ruusu's loop-AES userspace tool (Debian package aespipe), which
// implements loop-AES's multi-key-v2 and -v3 formats independently of
// dm-crypt and of this project: 64 or 65 key lines, AES-128/192/256, 130
// sectors from IV offsets 0 and 4294967290 (crossing 2^32). The key lines
// become the dm-crypt key as cryptsetup's lib/loopaes does. aespipe's -O
// keeps only 32 bits of the offset, so sector numbers of 2^32 and more are
// covered only by the run across 2^32, and the crop of the sector number to
// 56 bits only by the structural test below.

import (
	"bytes"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"testing"
)

// lmkVectorPlaintext is SHA-256("blkcrypt lmk vector" || uint32_le(j)) for
// j = 0, 1, ..., cut to n bytes.
func lmkVectorPlaintext(n int) []byte {
	var out []byte
	for j := uint32(0); len(out) < n; j++ {
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], j)
		s := sha256.Sum256(append([]byte("blkcrypt lmk vector"), b[:]...))
		out = append(out, s[:]...)
	}
	return out[:n]
}

// loopAESKey turns loop-AES key lines into a dm-crypt key as cryptsetup's
// LOOPAES_parse_keyfile does: each line hashed (SHA-256/384/512 for 16/24/32
// byte keys), cut to the key size, byte 0 XORed with 0x55 (64 keys) or 0xF4
// (65 keys).
func loopAESKey(t *testing.T, lines []string, size int) []byte {
	t.Helper()
	tweak := map[int]byte{64: 0x55, 65: 0xF4}[len(lines)]
	var key []byte
	for _, l := range lines {
		var h []byte
		switch size {
		case 16:
			s := sha256.Sum256([]byte(l))
			h = s[:]
		case 24:
			s := sha512.Sum384([]byte(l))
			h = s[:]
		case 32:
			s := sha512.Sum512([]byte(l))
			h = s[:]
		default:
			t.Fatalf("key size %d", size)
		}
		k := bytes.Clone(h[:size])
		k[0] ^= tweak
		key = append(key, k...)
	}
	return key
}

func TestLMKAespipeVectors(t *testing.T) {
	raw, err := os.ReadFile("testdata/lmk_aespipe.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Lines   []string `json:"key_lines_text"`
		Vectors []struct {
			ID       string `json:"id"`
			Keys     int    `json:"key_lines"`
			KeyBytes int    `json:"key_part_bytes"`
			Offset   uint64 `json:"iv_offset_512"`
			Sectors  int    `json:"sectors"`
			SHA256   string `json:"ciphertext_sha256"`
			First    string `json:"ciphertext_first_32_hex"`
		} `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Vectors) != 12 || len(f.Lines) != 65 {
		t.Fatalf("%d vectors, %d key lines; want 12 and 65", len(f.Vectors), len(f.Lines))
	}
	for _, v := range f.Vectors {
		key := loopAESKey(t, f.Lines[:v.Keys], v.KeyBytes)
		plain := lmkVectorPlaintext(v.Sectors * 512)
		for _, viaOffset := range []bool{true, false} {
			opts, first := Options{IVOffset: v.Offset}, uint64(0)
			if !viaOffset {
				opts, first = Options{}, v.Offset
			}
			c, err := New("aes:64-cbc-lmk", key, opts)
			if err != nil {
				t.Fatalf("%s: %v", v.ID, err)
			}
			buf := bytes.Clone(plain)
			if err := c.EncryptSectors(buf, buf, first); err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(buf)
			if got := hex.EncodeToString(sum[:]); got != v.SHA256 {
				t.Errorf("%s (offset via IVOffset %v): ciphertext SHA-256 %s, aespipe %s; first bytes %x, aespipe %s",
					v.ID, viaOffset, got, v.SHA256, buf[:32], v.First)
				continue
			}
			if err := c.DecryptSectors(buf, buf, first); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf, plain) {
				t.Errorf("%s: decryption does not restore the plaintext", v.ID)
			}
		}
	}
}

// md5Padded is MD5 built from md5Block with RFC 1321 padding.
func md5Padded(msg []byte) [16]byte {
	st := md5Init
	p := append(bytes.Clone(msg), 0x80)
	for len(p)%64 != 56 {
		p = append(p, 0)
	}
	p = binary.LittleEndian.AppendUint64(p, uint64(len(msg))*8)
	for i := 0; i < len(p); i += 64 {
		md5Block(&st, p[i:i+64])
	}
	var out [16]byte
	for i, w := range st {
		binary.LittleEndian.PutUint32(out[4*i:], w)
	}
	return out
}

func TestLMKMD5Block(t *testing.T) {
	for _, n := range []int{0, 1, 55, 56, 63, 64, 65, 119, 128, 512, 576, 1000} {
		msg := make([]byte, n)
		_, _ = rand.Read(msg)
		if got, want := md5Padded(msg), md5.Sum(msg); got != want {
			t.Fatalf("len %d: %x, crypto/md5 %x", n, got, want)
		}
	}
	// The unpadded state after whole blocks is what crypto/md5 saves in its
	// marshalled state ("md5\x01", then the four words big-endian).
	msg := make([]byte, 512)
	_, _ = rand.Read(msg)
	h := md5.New()
	h.Write(msg)
	saved, err := h.(interface{ MarshalBinary() ([]byte, error) }).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	st := md5Init
	for i := 0; i < 512; i += 64 {
		md5Block(&st, msg[i:i+64])
	}
	if string(saved[:4]) != "md5\x01" {
		t.Logf("crypto/md5 marshalled state starts %q; state comparison skipped", saved[:4])
		return
	}
	{
		for i, w := range st {
			if got := binary.BigEndian.Uint32(saved[4+4*i:]); got != w {
				t.Fatalf("state word %d: %08x, crypto/md5 %08x", i, w, got)
			}
		}
	}
}

func lmkKey(t *testing.T, parts, size int) []byte {
	t.Helper()
	k := make([]byte, parts*size)
	_, _ = rand.Read(k)
	return k
}

func TestLMKStructure(t *testing.T) {
	v2, err := New("aes:64-cbc-lmk", lmkKey(t, 64, 16), Options{})
	if err != nil {
		t.Fatal(err)
	}
	m2 := v2.data.(*lmkMode)
	if m2.seed != nil || len(v2.tfms) != 64 {
		t.Fatalf("v2: seed %v, %d subkeys", m2.seed != nil, len(v2.tfms))
	}
	k3 := lmkKey(t, 65, 32)
	v3, err := New("aes:64-cbc-lmk", k3, Options{})
	if err != nil {
		t.Fatal(err)
	}
	m3 := v3.data.(*lmkMode)
	if m3.seed == nil || len(v3.tfms) != 64 || v3.tfms[0].KeySize() != 32 {
		t.Fatal("v3: no seed or wrong subkeys")
	}
	// The seed is the first 16 bytes of the 65th key part, zero-padded.
	var want [lmkSeedSize]byte
	copy(want[:], k3[64*32:64*32+16])
	if *m3.seed != want {
		t.Fatal("v3 seed is not the first 16 bytes of key part 65")
	}

	data := make([]byte, 512)
	_, _ = rand.Read(data)
	var a, b [16]byte
	// The IV depends on blocks 1..31 and on the sector, not on block 0.
	m2.iv(&a, data, 5)
	data[0] ^= 1
	m2.iv(&b, data, 5)
	if a != b {
		t.Fatal("IV depends on the first block")
	}
	data[511] ^= 1
	m2.iv(&b, data, 5)
	if a == b {
		t.Fatal("IV does not depend on the last block")
	}
	m2.iv(&a, data, 6)
	if a == b {
		t.Fatal("IV does not depend on the sector")
	}
	m3.iv(&a, data, 5)
	if a == b {
		t.Fatal("v3 seed does not change the IV")
	}
	// Sector numbers are cropped to 56 bits.
	m2.iv(&a, data, 7)
	m2.iv(&b, data, 7|1<<56)
	if a != b {
		t.Fatal("sector bits above 56 reach the IV")
	}
	m2.iv(&b, data, 7|1<<55)
	if a == b {
		t.Fatal("sector bit 55 does not reach the IV")
	}

	// Encryption is CBC with that IV under the subkey sector & 63.
	plain := make([]byte, 3*512)
	_, _ = rand.Read(plain)
	for _, c := range []*Cipher{v2, v3} {
		m := c.data.(*lmkMode)
		ct := make([]byte, len(plain))
		if err := c.EncryptSectors(ct, plain, 62); err != nil {
			t.Fatal(err)
		}
		for s := 0; s < 3; s++ {
			n := uint64(62 + s)
			m.iv(&a, plain[s*512:(s+1)*512], n)
			want := make([]byte, 512)
			if err := c.tfms[n&63].Encrypt(want, plain[s*512:(s+1)*512], a[:]); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(want, ct[s*512:(s+1)*512]) {
				t.Fatalf("sector %d is not CBC with the lmk IV under subkey %d", n, n&63)
			}
		}
		src := bytes.Clone(ct)
		back := make([]byte, len(ct))
		if err := c.DecryptSectors(back, ct, 62); err != nil || !bytes.Equal(back, plain) {
			t.Fatalf("round trip failed: %v", err)
		}
		if !bytes.Equal(src, ct) {
			t.Fatal("decryption modified its source")
		}
		if err := c.DecryptSectors(ct, ct, 62); err != nil || !bytes.Equal(ct, plain) {
			t.Fatalf("in-place round trip failed: %v", err)
		}
	}
	v3.Wipe()
	if *m3.seed != [lmkSeedSize]byte{} {
		t.Fatal("Wipe left the seed")
	}
}

func TestLMKRejects(t *testing.T) {
	key := lmkKey(t, 64, 16)
	if _, err := New("aes:64-cbc-lmk", key, Options{SectorSize: 4096}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("4096-byte sectors: %v", err)
	}
	if _, err := New("capi:cbc(aes)-lmk", key[:16], Options{}); err == nil {
		t.Error("capi: lmk accepted with one subkey (dm-crypt uses 64)")
	}
	if _, err := New("aes:64-cbc-lmk", key[:64*16-1], Options{}); err == nil {
		t.Error("truncated key accepted")
	}
	// Single-key lmk exists in dm-crypt (no seed possible: every length is
	// a multiple of one).
	if _, err := New("aes-cbc-lmk", key[:16], Options{}); err != nil {
		t.Errorf("aes-cbc-lmk: %v", err)
	}
}
