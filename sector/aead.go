package sector

import (
	"bytes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/blkcrypt/blkcrypt/capi"
	"github.com/blkcrypt/blkcrypt/internal/aead"
	"github.com/blkcrypt/blkcrypt/internal/gcm"
)

// ErrAuth is the error of a sector whose tag does not verify (the
// kernel's EBADMSG, which dm-crypt turns into EILSEQ). It is always
// wrapped in an *AuthError naming the sector.
var ErrAuth = errors.New("sector: authentication tag mismatch")

// AuthError names the sector whose tag did not verify.
type AuthError struct {
	// Sector is the 512-byte sector number the way dm-crypt counts it
	// (its "INTEGRITY AEAD ERROR, sector N" message).
	Sector uint64
}

func (e *AuthError) Error() string {
	return fmt.Sprintf("sector: authentication tag mismatch at sector %d", e.Sector)
}

// Unwrap makes errors.Is(err, ErrAuth) true.
func (e *AuthError) Unwrap() error { return ErrAuth }

// AEAD is one of dm-crypt's authenticated sector ciphers: the ones a
// LUKS2 volume made with cryptsetup --integrity uses, over a dm-integrity
// device whose per-sector tag holds the metadata (MetaSize bytes a
// sector): the authentication tag, then, for the -random IV modes, the
// IV the sector was written with.
//
// As drivers/md/dm-crypt.c (crypt_convert_block_aead) computes it, the
// associated data of a sector is its 512-byte sector number (little
// endian, 64 bits, counting from the start of the dm-integrity data)
// followed by the IV; the data is the sector. The modes:
//
//   - aes-gcm-random with integrity aead: the kernel's gcm(aes), a fresh
//     random 12-byte IV per write, 16-byte tag: 28 bytes of metadata.
//   - chacha20-random with integrity poly1305: rfc7539(chacha20,poly1305),
//     12-byte random IV, 16-byte tag: 28 bytes.
//   - aegis128-random with integrity aead: AEGIS-128, 16-byte random IV,
//     16-byte tag: 32 bytes.
//   - a plain sector cipher (aes-xts-plain64, …) with integrity
//     hmac(sha1|sha256|sha512): authenc(hmac(H),MODE(CIPHER)): the data is
//     encrypted as dm-crypt's sector cipher would, and the tag is the HMAC
//     over associated data and ciphertext (the IV is the generated one,
//     not stored). The volume key is the cipher's key followed by the
//     HMAC key (the digest's size), as dm-crypt splits it.
//   - a CBC cipher with essiv:H (aes-cbc-essiv:sha256) and integrity
//     hmac(…): dm-crypt wraps the AEAD in the essiv template,
//     essiv(authenc(hmac(…),cbc(aes)),sha256). Unlike the skcipher essiv,
//     whose salt is H(key), the AEAD form's salt is H(cipher key || HMAC
//     key) (crypto/essiv.c hashes both halves of the authenc key); the
//     plain64 sector number encrypted with the salt is both the CBC IV
//     and the IV in the associated data.
//
// An AEAD is safe for concurrent use.
type AEAD struct {
	spec, integrity string
	ss              int
	ivSize          int // stored IV bytes; 0 for authenc
	tagSize         int
	a               cipher.AEAD // random modes
	enc             *Cipher     // authenc with a plain IV: the sector cipher
	cbc             *capi.Tfm   // authenc with essiv: the chaining mode
	essiv           cipher.Block
	ivMode          string // authenc: the IV generator
	ivOffset        uint64
	macKey          []byte
	newHash         func() hash.Hash
	rand            io.Reader
}

// AEADMetaSize returns the per-sector metadata (dm-integrity tag) size
// of a cipher spec and integrity type, as cryptsetup computes it for the
// dm-integrity device; ok is false for a pair NewAEAD refuses.
func AEADMetaSize(spec, integrity string) (size int, ok bool) {
	switch {
	case spec == "aes-gcm-random" && integrity == "aead":
		return 28, true
	case spec == "chacha20-random" && integrity == "poly1305":
		return 28, true
	case spec == "aegis128-random" && integrity == "aead":
		return 32, true
	}
	if h, ok := hmacHash(integrity); ok && !strings.HasSuffix(spec, "-random") {
		return h().Size(), true
	}
	return 0, false
}

// AEADKeySize returns the volume key size of a spec and integrity type
// when it is fixed, or 0 when the cipher takes several (then it is the
// cipher's key plus, for hmac, the digest size).
func AEADKeySize(spec, integrity string) int {
	switch spec {
	case "chacha20-random":
		return chacha20poly1305.KeySize
	case "aegis128-random":
		return aead.AEGIS128KeySize
	}
	return 0
}

func hmacHash(integrity string) (func() hash.Hash, bool) {
	switch integrity {
	case "hmac(sha1)":
		return sha1.New, true
	case "hmac(sha256)":
		return sha256.New, true
	case "hmac(sha512)":
		return sha512.New, true
	}
	return nil, false
}

// NewAEAD makes an authenticated sector cipher from a LUKS2 segment's
// encryption ("aes-gcm-random") and integrity type ("aead",
// "poly1305", "hmac(sha256)"), the volume key and the sector size.
// ivOffset is dm-crypt's iv_offset (LUKS2's iv_tweak) for the generated
// IVs of authenc modes.
func NewAEAD(spec, integrity string, key []byte, sectorSize int, ivOffset uint64) (*AEAD, error) {
	if sectorSize == 0 {
		sectorSize = 512
	}
	switch sectorSize {
	case 512, 1024, 2048, 4096:
	default:
		return nil, fmt.Errorf("%w: sector size %d is not 512, 1024, 2048 or 4096", ErrInvalidOptions, sectorSize)
	}
	meta, ok := AEADMetaSize(spec, integrity)
	if !ok {
		return nil, fmt.Errorf("%w: %q with integrity %q", ErrUnsupported, spec, integrity)
	}
	a := &AEAD{spec: spec, integrity: integrity, ss: sectorSize, tagSize: meta, rand: rand.Reader}
	var err error
	switch spec {
	case "aes-gcm-random":
		a.a, err = gcm.New(key)
		a.ivSize = 12
	case "chacha20-random":
		a.a, err = chacha20poly1305.New(key)
		a.ivSize = chacha20poly1305.NonceSize
	case "aegis128-random":
		a.a, err = aead.NewAEGIS128(key, 16)
		a.ivSize = aead.AEGIS128NonceSize
	default:
		h, _ := hmacHash(integrity)
		mk := h().Size()
		if len(key) <= mk {
			return nil, fmt.Errorf("%w: a %d-byte key holds no cipher key besides the %d-byte %s key", ErrInvalidOptions, len(key), mk, integrity)
		}
		s, perr := ParseSpec(spec)
		if perr != nil {
			return nil, perr
		}
		encKey, macKey := key[:len(key)-mk], key[len(key)-mk:]
		switch s.IVMode {
		case "plain64", "plain", "plain64be":
			a.enc, err = NewFromSpec(s, encKey, Options{SectorSize: sectorSize, IVOffset: ivOffset})
		case "essiv":
			err = a.setupESSIV(s, encKey, macKey)
		default:
			return nil, fmt.Errorf("%w: %q with integrity %q: only plain and essiv IVs are supported for authenc", ErrUnsupported, spec, integrity)
		}
		a.macKey = append([]byte(nil), macKey...)
		a.newHash = h
		a.ivMode, a.ivOffset = s.IVMode, ivOffset
		a.ivSize = 0
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrInvalidOptions, spec, err)
	}
	if a.a != nil {
		a.tagSize = meta - a.ivSize
	}
	return a, nil
}

// setupESSIV keys essiv(authenc(hmac(…),MODE(CIPHER)),H) as
// crypto/essiv.c does: MODE(CIPHER) with the cipher key, and CIPHER (the
// name inside the innermost parentheses) keyed with the salt
// H(cipher key || HMAC key), whose digest must be a key size of CIPHER
// and whose block the IV's size.
func (a *AEAD) setupESSIV(s *Spec, encKey, macKey []byte) error {
	if s.KeyCount > 1 {
		return fmt.Errorf("%w: %s: essiv takes one key", ErrUnsupported, s)
	}
	inner := s.innerCAPI()
	tfm, err := capi.NewSkcipher(inner, encKey)
	if err != nil {
		return err
	}
	open := strings.LastIndexByte(inner, '(')
	end := strings.IndexByte(inner[open+1:], ')')
	if open < 0 || end < 0 {
		return fmt.Errorf("%w: %s: no block cipher in %q", ErrInvalidSpec, s, inner)
	}
	h, err := capi.NewHash(s.IVOpts)
	if err != nil {
		return err
	}
	h.Write(encKey)
	h.Write(macKey)
	salt := h.Sum(nil)
	defer clear(salt)
	b, err := capi.NewCipher(inner[open+1:open+1+end], salt)
	if err != nil {
		return fmt.Errorf("essiv salt of %s: %w", s.IVOpts, err)
	}
	if b.BlockSize() != tfm.IVSize() {
		return fmt.Errorf("%w: %s: a %d-byte IV is not one %d-byte block", ErrInvalidSpec, s, tfm.IVSize(), b.BlockSize())
	}
	if !tfm.ValidLength(a.ss) {
		return fmt.Errorf("%w: %s cannot encrypt %d-byte sectors", ErrInvalidOptions, inner, a.ss)
	}
	a.cbc, a.essiv = tfm, b
	return nil
}

// SectorSize is the encryption unit in bytes.
func (a *AEAD) SectorSize() int { return a.ss }

// MetaSize is the per-sector metadata in bytes: TagSize then IVSize.
func (a *AEAD) MetaSize() int { return a.tagSize + a.ivSize }

// TagSize is the authentication tag's size.
func (a *AEAD) TagSize() int { return a.tagSize }

// IVSize is the size of the IV stored after the tag (0 unless -random).
func (a *AEAD) IVSize() int { return a.ivSize }

// Spec and Integrity are the names NewAEAD was given.
func (a *AEAD) Spec() string      { return a.spec }
func (a *AEAD) Integrity() string { return a.integrity }

// KernelName is the cipher in dm-crypt's table form, as cryptsetup
// writes it: "capi:gcm(aes)-random", "capi:rfc7539(chacha20,poly1305)-random",
// "capi:authenc(hmac(sha256),xts(aes))-plain64".
func (a *AEAD) KernelName() string {
	switch a.spec {
	case "aes-gcm-random":
		return "capi:gcm(aes)-random"
	case "chacha20-random":
		return "capi:rfc7539(chacha20,poly1305)-random"
	case "aegis128-random":
		return "capi:aegis128-random"
	}
	s, _ := ParseSpec(a.spec)
	name := "capi:authenc(" + a.integrity + "," + s.innerCAPI() + ")-" + s.IVMode
	if s.IVOpts != "" {
		name += ":" + s.IVOpts
	}
	return name
}

// SetRand replaces the source of the random IVs (tests).
func (a *AEAD) SetRand(r io.Reader) { a.rand = r }

// Wipe clears the keys; the AEAD must not be used afterwards.
func (a *AEAD) Wipe() {
	if a.enc != nil {
		a.enc.Wipe()
	}
	clear(a.macKey)
	if g, ok := a.a.(*gcm.GCM); ok {
		g.Wipe()
	}
	a.a, a.cbc, a.essiv = nil, nil, nil
}

func (a *AEAD) check(data, meta []byte) (int, error) {
	if len(data)%a.ss != 0 {
		return 0, fmt.Errorf("%w: %d bytes is not a whole number of %d-byte sectors", ErrInvalidOptions, len(data), a.ss)
	}
	n := len(data) / a.ss
	if len(meta) != n*a.MetaSize() {
		return 0, fmt.Errorf("%w: %d metadata bytes for %d sectors of %d", ErrInvalidOptions, len(meta), n, a.MetaSize())
	}
	return n, nil
}

// ad builds the associated data: the 512-byte sector number, then the IV.
func ad(buf []byte, sector uint64, iv []byte) []byte {
	buf = binary.LittleEndian.AppendUint64(buf[:0], sector)
	return append(buf, iv...)
}

// EncryptSectors encrypts src (whole sectors) into dst and writes each
// sector's metadata into meta (MetaSize bytes a sector); first is the
// 512-byte number of the first sector. Random modes draw a fresh IV for
// every sector. dst and src may be the same slice.
func (a *AEAD) EncryptSectors(dst, meta, src []byte, first uint64) error {
	n, err := a.check(src, meta)
	if err != nil {
		return err
	}
	if len(dst) < len(src) {
		return fmt.Errorf("%w: dst shorter than src", ErrInvalidOptions)
	}
	step := uint64(a.ss >> 9)
	ms := a.MetaSize()
	var adBuf [8 + 16]byte
	if a.newHash != nil {
		ivs := a.authencIVs(n, first)
		if a.enc != nil {
			if err := a.enc.EncryptSectorsInline(dst[:len(src)], src, first); err != nil {
				return err
			}
		} else if err := a.cbc.EncryptSectors(dst[:len(src)], src, a.ss, bytes.Clone(ivs)); err != nil {
			return err
		}
		mac := hmac.New(a.newHash, a.macKey)
		for i := range n {
			s := first + uint64(i)*step
			iv := ivs[i*a.adIVSize() : (i+1)*a.adIVSize()]
			mac.Reset()
			mac.Write(ad(adBuf[:], s, iv))
			mac.Write(dst[i*a.ss : (i+1)*a.ss])
			mac.Sum(meta[i*ms : i*ms : (i+1)*ms])
		}
		return nil
	}
	ivs := make([]byte, n*a.ivSize)
	if _, err := io.ReadFull(a.rand, ivs); err != nil {
		return fmt.Errorf("sector: random IV: %w", err)
	}
	if g, ok := a.a.(*gcm.GCM); ok {
		a.sealGCM(g, dst, meta, src, ivs, first)
		return nil
	}
	if ms, ok := a.a.(aead.Sectors); ok { // aegis128: all sectors in one call
		return a.sealSectors(ms, dst[:len(src)], meta, src, ivs, first, n)
	}
	scratch := make([]byte, 0, a.ss+a.a.Overhead())
	for i := range n {
		iv := ivs[i*a.ivSize : (i+1)*a.ivSize]
		s := first + uint64(i)*step
		out := a.a.Seal(scratch[:0], iv, src[i*a.ss:(i+1)*a.ss], ad(adBuf[:], s, iv))
		copy(dst[i*a.ss:(i+1)*a.ss], out[:a.ss])
		m := meta[i*ms : (i+1)*ms]
		copy(m, out[a.ss:])
		copy(m[a.tagSize:], iv)
	}
	clear(scratch[:cap(scratch)])
	return nil
}

// adIVSize is the size of an authenc mode's IV in the associated data:
// the data cipher's IV size (at least 8, as dm-crypt's iv_size).
func (a *AEAD) adIVSize() int {
	if a.enc != nil {
		return a.enc.ivSize
	}
	return a.cbc.IVSize()
}

// authencIVs are the IVs dm-crypt generates for n sectors from first (512-
// byte units), as the associated data holds them: the sector number
// with iv_offset added (512-byte units: LUKS2 does not set
// iv_large_sectors), little endian for plain and plain64, big endian in
// the last 8 bytes for plain64be, and for essiv plain64 encrypted with
// the salt's cipher (which is then also the data cipher's IV).
func (a *AEAD) authencIVs(n int, first uint64) []byte {
	size := a.adIVSize()
	ivs := make([]byte, n*size)
	step := uint64(a.ss >> 9)
	for i := range n {
		iv := ivs[i*size : (i+1)*size]
		s := first + uint64(i)*step + a.ivOffset
		switch a.ivMode {
		case "plain":
			binary.LittleEndian.PutUint32(iv, uint32(s))
		case "plain64be":
			binary.BigEndian.PutUint64(iv[len(iv)-8:], s)
		default:
			binary.LittleEndian.PutUint64(iv, s)
		}
		if a.essiv != nil {
			a.essiv.Encrypt(iv, iv)
		}
	}
	return ivs
}

// DecryptSectors verifies and decrypts src (whole sectors) with their
// metadata into dst. A sector whose tag does not verify stops the call
// with an *AuthError (errors.Is ErrAuth) naming it; dst then holds
// nothing of it or of the sectors after it (they are zeroed). dst and
// src may be the same slice.
func (a *AEAD) DecryptSectors(dst, src, meta []byte, first uint64) error {
	n, err := a.check(src, meta)
	if err != nil {
		return err
	}
	if len(dst) < len(src) {
		return fmt.Errorf("%w: dst shorter than src", ErrInvalidOptions)
	}
	step := uint64(a.ss >> 9)
	ms := a.MetaSize()
	var adBuf [8 + 16]byte
	if a.newHash != nil {
		ivs := a.authencIVs(n, first)
		mac := hmac.New(a.newHash, a.macKey)
		sum := make([]byte, 0, mac.Size())
		good := n
		var bad error
		for i := range n {
			s := first + uint64(i)*step
			mac.Reset()
			mac.Write(ad(adBuf[:], s, ivs[i*a.adIVSize():(i+1)*a.adIVSize()]))
			mac.Write(src[i*a.ss : (i+1)*a.ss])
			sum = mac.Sum(sum[:0])
			if subtle.ConstantTimeCompare(sum[:a.tagSize], meta[i*ms:i*ms+a.tagSize]) != 1 {
				good, bad = i, &AuthError{Sector: s}
				break
			}
		}
		if good > 0 {
			var err error
			if a.enc != nil {
				err = a.enc.DecryptSectorsInline(dst[:good*a.ss], src[:good*a.ss], first)
			} else {
				err = a.cbc.DecryptSectors(dst[:good*a.ss], src[:good*a.ss], a.ss, ivs[:good*a.adIVSize()])
			}
			if err != nil {
				return err
			}
		}
		if bad != nil {
			clear(dst[good*a.ss : len(src)])
		}
		return bad
	}
	if g, ok := a.a.(*gcm.GCM); ok {
		return a.openGCM(g, dst, src, meta, first)
	}
	if ms, ok := a.a.(aead.Sectors); ok { // aegis128: all sectors in one call
		return a.openSectors(ms, dst[:len(src)], src, meta, first, n)
	}
	scratch := make([]byte, a.ss+a.tagSize)
	for i := range n {
		m := meta[i*ms : (i+1)*ms]
		iv := m[a.tagSize:]
		s := first + uint64(i)*step
		copy(scratch, src[i*a.ss:(i+1)*a.ss])
		copy(scratch[a.ss:], m[:a.tagSize])
		if _, err := a.a.Open(dst[i*a.ss:i*a.ss], iv, scratch, ad(adBuf[:], s, iv)); err != nil {
			clear(dst[i*a.ss : len(src)])
			clear(scratch)
			return &AuthError{Sector: s}
		}
	}
	clear(scratch)
	return nil
}

// sealGCM is EncryptSectors' loop for aes-gcm-random: internal/gcm
// writes each sector's ciphertext in place in dst and its tag straight
// into the metadata, with no scratch buffer to copy through.
func (a *AEAD) sealGCM(g *gcm.GCM, dst, meta, src, ivs []byte, first uint64) {
	step := uint64(a.ss >> 9)
	ms := a.MetaSize()
	var adBuf [8 + 16]byte
	for i := range len(src) / a.ss {
		iv := ivs[i*a.ivSize : (i+1)*a.ivSize]
		s := first + uint64(i)*step
		m := meta[i*ms : (i+1)*ms]
		g.SealDetached(dst[i*a.ss:(i+1)*a.ss], m[:a.tagSize], iv, src[i*a.ss:(i+1)*a.ss], ad(adBuf[:], s, iv))
		copy(m[a.tagSize:], iv)
	}
}

// openGCM is DecryptSectors' loop for aes-gcm-random (see sealGCM).
func (a *AEAD) openGCM(g *gcm.GCM, dst, src, meta []byte, first uint64) error {
	step := uint64(a.ss >> 9)
	ms := a.MetaSize()
	var adBuf [8 + 16]byte
	for i := range len(src) / a.ss {
		m := meta[i*ms : (i+1)*ms]
		iv := m[a.tagSize:]
		s := first + uint64(i)*step
		if err := g.OpenDetached(dst[i*a.ss:(i+1)*a.ss], iv, src[i*a.ss:(i+1)*a.ss], m[:a.tagSize], ad(adBuf[:], s, iv)); err != nil {
			clear(dst[i*a.ss : len(src)])
			return &AuthError{Sector: s}
		}
	}
	return nil
}

// sealSectors encrypts n sectors with one call of a multi-message AEAD
// (AEGIS-128, whose kernels run several sectors side by side): the same
// bytes as sealing each sector, its tag then its IV in the metadata.
func (a *AEAD) sealSectors(s aead.Sectors, dst, meta, src, ivs []byte, first uint64, n int) error {
	ads, tags := a.multiAD(ivs, first, n), make([]byte, n*a.tagSize)
	if err := s.SealSectors(dst, tags, src, ivs, ads, n); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	ms := a.MetaSize()
	for i := range n {
		m := meta[i*ms : (i+1)*ms]
		copy(m, tags[i*a.tagSize:(i+1)*a.tagSize])
		copy(m[a.tagSize:], ivs[i*a.ivSize:(i+1)*a.ivSize])
	}
	return nil
}

// openSectors is DecryptSectors with a multi-message AEAD, which zeroes
// dst from the first sector that does not verify on.
func (a *AEAD) openSectors(s aead.Sectors, dst, src, meta []byte, first uint64, n int) error {
	ms := a.MetaSize()
	ivs, tags := make([]byte, n*a.ivSize), make([]byte, n*a.tagSize)
	for i := range n {
		m := meta[i*ms : (i+1)*ms]
		copy(tags[i*a.tagSize:], m[:a.tagSize])
		copy(ivs[i*a.ivSize:], m[a.tagSize:])
	}
	err := s.OpenSectors(dst, src, tags, ivs, a.multiAD(ivs, first, n), n)
	if oe := (*aead.OpenError)(nil); errors.As(err, &oe) {
		return &AuthError{Sector: first + uint64(oe.Index)*uint64(a.ss>>9)}
	} else if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	return nil
}

// multiAD is the associated data of n sectors back to back.
func (a *AEAD) multiAD(ivs []byte, first uint64, n int) []byte {
	w := 8 + a.ivSize
	ads := make([]byte, n*w)
	for i := range n {
		ad(ads[i*w:(i+1)*w:(i+1)*w], first+uint64(i)*uint64(a.ss>>9), ivs[i*a.ivSize:(i+1)*a.ivSize])
	}
	return ads
}
