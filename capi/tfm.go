package capi

import "fmt"

// Tfm is a keyed skcipher transform: a driver plus its key, like the
// kernel's struct crypto_skcipher after setkey. It validates every request
// before the driver sees it, so drivers may assume well-formed input. A Tfm
// holds no per-request state and is safe for concurrent use.
type Tfm struct {
	alg    *Alg
	impl   Skcipher
	sec    SectorSkcipher // nil when the driver has no batch path
	keyLen int
}

// NewSkcipher looks up the best driver of name and keys it.
func NewSkcipher(name string, key []byte) (*Tfm, error) {
	a, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	return a.Skcipher(key)
}

// Skcipher keys a TypeSkcipher driver.
func (a *Alg) Skcipher(key []byte) (*Tfm, error) {
	if a.Type != TypeSkcipher {
		return nil, fmt.Errorf("%w: %s is a %s, not a skcipher", ErrInvalidName, a.Name, a.Type)
	}
	if err := a.checkKey(key); err != nil {
		return nil, err
	}
	impl, err := a.NewSkcipher(key)
	if err != nil {
		return nil, err
	}
	t := &Tfm{alg: a, impl: impl, keyLen: len(key)}
	t.sec, _ = impl.(SectorSkcipher)
	return t, nil
}

// UncheckedPlain64 returns the driver's Plain64Skcipher form, or nil. Its
// calls skip Tfm's validation, so the caller must already guarantee what
// EncryptSectors checks: len(src) is a valid length, len(dst) >= len(src),
// and dst and src are the same slice or do not overlap.
func (t *Tfm) UncheckedPlain64() Plain64Skcipher {
	p, _ := t.impl.(Plain64Skcipher)
	return p
}

// Alg returns the driver behind t.
func (t *Tfm) Alg() *Alg { return t.alg }

// KeySize is the key length in bytes.
func (t *Tfm) KeySize() int { return t.keyLen }

// IVSize is the IV length every request must carry.
func (t *Tfm) IVSize() int { return t.alg.IVSize }

// BlockSize is the length granularity of requests.
func (t *Tfm) BlockSize() int { return t.alg.BlockSize }

// ValidLength reports whether a request of n bytes is acceptable.
func (t *Tfm) ValidLength(n int) bool {
	a := t.alg
	if n == 0 {
		return true
	}
	if a.MinLen > 0 {
		return n >= a.MinLen
	}
	return n%a.BlockSize == 0
}

func (t *Tfm) check(dst, src, iv []byte) error {
	if len(iv) != t.alg.IVSize {
		return fmt.Errorf("%w: %s needs a %d-byte IV, got %d", ErrInvalidLength, t.alg.Name, t.alg.IVSize, len(iv))
	}
	if !t.ValidLength(len(src)) {
		if t.alg.MinLen > 0 {
			return fmt.Errorf("%w: %s needs at least %d bytes, got %d", ErrInvalidLength, t.alg.Name, t.alg.MinLen, len(src))
		}
		return fmt.Errorf("%w: %s needs a multiple of %d bytes, got %d", ErrInvalidLength, t.alg.Name, t.alg.BlockSize, len(src))
	}
	if len(dst) < len(src) {
		return fmt.Errorf("%w: destination is %d bytes, source %d", ErrInvalidLength, len(dst), len(src))
	}
	if InexactOverlap(dst[:len(src)], src) {
		return fmt.Errorf("%w: destination partly overlaps source", ErrInvalidLength)
	}
	return nil
}

// Encrypt encrypts src into dst (which may be src itself) with iv. The IV is
// not modified.
func (t *Tfm) Encrypt(dst, src, iv []byte) error {
	if err := t.check(dst, src, iv); err != nil {
		return err
	}
	if len(src) > 0 {
		t.impl.Encrypt(dst[:len(src)], src, iv)
	}
	return nil
}

// Decrypt is the inverse of Encrypt.
func (t *Tfm) Decrypt(dst, src, iv []byte) error {
	if err := t.check(dst, src, iv); err != nil {
		return err
	}
	if len(src) > 0 {
		t.impl.Decrypt(dst[:len(src)], src, iv)
	}
	return nil
}

func (t *Tfm) checkSectors(dst, src []byte, sectorSize int, ivs []byte) (int, error) {
	if sectorSize <= 0 || !t.ValidLength(sectorSize) {
		return 0, fmt.Errorf("%w: %s cannot take %d-byte sectors", ErrInvalidLength, t.alg.Name, sectorSize)
	}
	if len(src)%sectorSize != 0 {
		return 0, fmt.Errorf("%w: %d bytes is not a whole number of %d-byte sectors", ErrInvalidLength, len(src), sectorSize)
	}
	n := len(src) / sectorSize
	if len(ivs) != n*t.alg.IVSize {
		return 0, fmt.Errorf("%w: %d sectors need %d IV bytes, got %d", ErrInvalidLength, n, n*t.alg.IVSize, len(ivs))
	}
	if len(dst) < len(src) {
		return 0, fmt.Errorf("%w: destination is %d bytes, source %d", ErrInvalidLength, len(dst), len(src))
	}
	if InexactOverlap(dst[:len(src)], src) {
		return 0, fmt.Errorf("%w: destination partly overlaps source", ErrInvalidLength)
	}
	return n, nil
}

// EncryptSectors encrypts len(src)/sectorSize independent requests of
// sectorSize bytes, request i with the IV ivs[i*IVSize:(i+1)*IVSize]. ivs is
// used as scratch space and its contents are undefined afterwards. Drivers
// with a batch path (multi-buffer CBC, XTS with many tweaks) process the
// whole batch in one call (for XTS, when sectorSize is a multiple of 16).
func (t *Tfm) EncryptSectors(dst, src []byte, sectorSize int, ivs []byte) error {
	n, err := t.checkSectors(dst, src, sectorSize, ivs)
	if err != nil || n == 0 {
		return err
	}
	if t.sec != nil && sectorSize%t.alg.BlockSize == 0 {
		t.sec.EncryptSectors(dst[:len(src)], src, sectorSize, ivs)
		return nil
	}
	is := t.alg.IVSize
	for i := 0; i < n; i++ {
		o := i * sectorSize
		t.impl.Encrypt(dst[o:o+sectorSize], src[o:o+sectorSize], ivs[i*is:(i+1)*is])
	}
	return nil
}

// DecryptSectors is the inverse of EncryptSectors.
func (t *Tfm) DecryptSectors(dst, src []byte, sectorSize int, ivs []byte) error {
	n, err := t.checkSectors(dst, src, sectorSize, ivs)
	if err != nil || n == 0 {
		return err
	}
	if t.sec != nil && sectorSize%t.alg.BlockSize == 0 {
		t.sec.DecryptSectors(dst[:len(src)], src, sectorSize, ivs)
		return nil
	}
	is := t.alg.IVSize
	for i := 0; i < n; i++ {
		o := i * sectorSize
		t.impl.Decrypt(dst[o:o+sectorSize], src[o:o+sectorSize], ivs[i*is:(i+1)*is])
	}
	return nil
}

// Wipe zeroes the key material the driver holds, where it can.
func (t *Tfm) Wipe() {
	if w, ok := t.impl.(Wiper); ok {
		w.Wipe()
	}
}
