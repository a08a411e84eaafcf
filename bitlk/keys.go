package bitlk

import (
	"crypto/aes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// stretchIterations is the SHA-256 count of BitLocker's key stretching.
const stretchIterations = 0x100000

// stretch is BitLocker's password and recovery-password KDF: a 88-byte
// structure (last hash, initial hash, salt, 64-bit little-endian counter)
// hashed 0x100000 times, each hash replacing the first field and the
// counter going up by one. initial is SHA-256(SHA-256(UTF-16LE password))
// for a password and SHA-256(16-byte recovery key) for a recovery password.
func stretch(initial *[32]byte, salt *[16]byte) [32]byte {
	var st [88]byte
	copy(st[32:64], initial[:])
	copy(st[64:80], salt[:])
	for i := uint64(0); i < stretchIterations; i++ {
		h := sha256.Sum256(st[:])
		copy(st[:32], h[:])
		binary.LittleEndian.PutUint64(st[80:], i+1)
	}
	var out [32]byte
	copy(out[:], st[:32])
	clear(st[:])
	return out
}

// passwordHash is the initial hash of a password: SHA-256 twice over its
// UTF-16LE form (up to a NUL). ok is false if the password is not UTF-8.
func passwordHash(pw []byte) (h [32]byte, ok bool) {
	if !utf8.Valid(pw) {
		return h, false
	}
	runes := []rune(string(pw))
	for i, r := range runes {
		if r == 0 {
			runes = runes[:i]
			break
		}
	}
	u := utf16.Encode(runes)
	b := make([]byte, 2*len(u))
	for i, c := range u {
		binary.LittleEndian.PutUint16(b[2*i:], c)
	}
	h = sha256.Sum256(b)
	h = sha256.Sum256(h[:])
	clear(b)
	clear(u)
	clear(runes)
	return h, true
}

// RecoveryKey converts a 48-digit recovery password (eight groups of six
// digits separated by dashes, each group a multiple of 11 below 720896)
// into its 16-byte key. A single trailing newline, as a key file may
// have, is ignored. ok is false if s does not have that form.
func RecoveryKey(s []byte) (key [16]byte, ok bool) {
	if len(s) == 56 && s[55] == '\n' {
		s = s[:55]
	}
	if len(s) != 55 {
		return key, false
	}
	for g := 0; g < 8; g++ {
		part := s[g*7 : g*7+6]
		if g < 7 && s[g*7+6] != '-' {
			return key, false
		}
		n := 0
		for _, c := range part {
			if c < '0' || c > '9' {
				return key, false
			}
			n = n*10 + int(c-'0')
		}
		if n%11 != 0 || n/11 > 0xffff {
			return key, false
		}
		binary.LittleEndian.PutUint16(key[2*g:], uint16(n/11))
	}
	return key, true
}

// startupKey extracts the external key of a startup key (.BEK) file made
// for the VMK v of volume m. ok is false if the file is for another VMK.
func startupKey(bek []byte, v *VMK, m *Metadata) (key []byte, ok bool, err error) {
	le := binary.LittleEndian
	if len(bek) < bekHeaderLen+6 {
		return nil, false, nil
	}
	if guidString(bek[16:32]) != v.GUID {
		return nil, false, nil
	}
	if ver := le.Uint32(bek[4:]); ver != 1 {
		return nil, true, fmt.Errorf("%w: startup key metadata version %d", ErrUnsupported, ver)
	}
	if size := le.Uint32(bek[0:]); int(size) != len(bek) {
		return nil, true, fmt.Errorf("%w: startup key file says it is %d bytes, it is %d", ErrCorrupt, size, len(bek))
	}
	e := bek[bekHeaderLen:]
	size := int(le.Uint16(e[0:]))
	if size < entryHeaderLen || le.Uint16(e[2:]) != entryStartupKey || le.Uint16(e[4:]) != valueExternalKey {
		return nil, true, fmt.Errorf("%w: startup key file holds no external key entry", ErrCorrupt)
	}
	b := bek[min(len(bek), bekHeaderLen+entryHeaderLen+startupKeyHdrLen):]
	for p := 0; len(b)-p >= 6; {
		size := int(le.Uint16(b[p:]))
		if size == 0 {
			break
		}
		if size > len(b)-p {
			return nil, true, fmt.Errorf("%w: startup key entry overruns the file", ErrCorrupt)
		}
		if size < entryHeaderLen {
			return nil, true, fmt.Errorf("%w: startup key entry of %d bytes is shorter than its header", ErrCorrupt, size)
		}
		e := b[p : p+size]
		if t := le.Uint16(e[2:]); t != entryProperty && t != entryVolumeGUID {
			return nil, true, fmt.Errorf("%w: unexpected startup key entry type %d", ErrCorrupt, t)
		}
		switch le.Uint16(e[4:]) {
		case valueKey:
			if size < entryHeaderLen+4+minKeyLen {
				return nil, true, fmt.Errorf("%w: startup key entry of %d bytes", ErrCorrupt, size)
			}
			return append([]byte(nil), e[entryHeaderLen+4:]...), true, nil
		case valueString:
		case valueGUID:
			if size < entryHeaderLen+16 {
				return nil, true, fmt.Errorf("%w: startup key GUID entry of %d bytes", ErrCorrupt, size)
			}
			if g := guidString(e[entryHeaderLen:]); g != m.GUID {
				return nil, true, fmt.Errorf("%w: startup key file is for volume %s, this is %s", ErrWrongPassphrase, g, m.GUID)
			}
		default:
			return nil, true, fmt.Errorf("%w: unexpected startup key entry value %d", ErrCorrupt, le.Uint16(e[4:]))
		}
		p += size
	}
	return nil, true, fmt.Errorf("%w: startup key file holds no key", ErrCorrupt)
}

// unwrap decrypts an AES-CCM wrapped key with key and checks the size
// field at its start. It returns the whole decrypted blob (12 bytes of
// metadata, then the key).
func unwrap(w *wrapped, key []byte) ([]byte, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	c, _ := newCCM(b, nonceLen, tagLen)
	ct := make([]byte, 0, len(w.Data)+tagLen)
	ct = append(append(ct, w.Data...), w.Tag[:]...)
	out, err := c.Open(nil, w.Nonce[:], ct, nil)
	if err != nil {
		return nil, err
	}
	if len(out) < keyMetadataLen {
		clear(out)
		return nil, fmt.Errorf("%w: decrypted key of %d bytes", ErrCorrupt, len(out))
	}
	if n := int(binary.LittleEndian.Uint16(out)); n != len(out) {
		clear(out)
		return nil, fmt.Errorf("%w: decrypted key data says %d bytes, has %d", ErrCorrupt, n, len(out))
	}
	return out, nil
}

// errSkip marks a VMK the secret does not apply to.
var errSkip = errors.New("protector does not apply")

// vmkKey derives the key that decrypts VMK v from the secret, or errSkip.
func (m *Metadata) vmkKey(v *VMK, secret []byte) ([]byte, error) {
	switch v.Protection {
	case Password:
		h, ok := passwordHash(secret)
		if !ok {
			return nil, errSkip
		}
		k := stretch(&h, &v.Salt)
		clear(h[:])
		return k[:], nil
	case RecoveryPassword:
		rk, ok := RecoveryKey(secret)
		if !ok {
			return nil, errSkip
		}
		h := sha256.Sum256(rk[:])
		clear(rk[:])
		k := stretch(&h, &v.Salt)
		clear(h[:])
		return k[:], nil
	case StartupKey:
		k, ok, err := startupKey(secret, v, m)
		if !ok {
			return nil, errSkip
		}
		return k, err
	}
	return nil, errSkip
}

// openVMK returns the decrypted VMK (32 bytes) of v with a secret, or of a
// clear-key VMK when secret is nil.
func (m *Metadata) openVMK(v *VMK, secret []byte) ([]byte, error) {
	var enc *wrapped
	for i := range v.keys {
		if !v.keys[i].Clear {
			enc = &v.keys[i]
			break
		}
	}
	if enc == nil {
		return nil, fmt.Errorf("%w: VMK %s has no encrypted key", ErrCorrupt, v.GUID)
	}
	var key []byte
	if v.Protection == ClearKey {
		if secret != nil {
			return nil, errSkip
		}
		for _, k := range v.keys {
			if k.Clear {
				key = append([]byte(nil), k.Data...)
				break
			}
		}
		if key == nil {
			return nil, fmt.Errorf("%w: clear key VMK %s has no key", ErrCorrupt, v.GUID)
		}
	} else {
		if secret == nil {
			return nil, errSkip
		}
		var err error
		if key, err = m.vmkKey(v, secret); err != nil {
			return nil, err
		}
	}
	defer clear(key)
	blob, err := unwrap(enc, key)
	if err != nil {
		if v.Protection == ClearKey {
			return nil, fmt.Errorf("%w: clear key VMK %s does not decrypt: %v", ErrCorrupt, v.GUID, err)
		}
		return nil, fmt.Errorf("%w: %v", ErrWrongPassphrase, err)
	}
	defer clear(blob)
	vmk := append([]byte(nil), blob[keyMetadataLen:]...)
	if len(vmk) != 32 {
		clear(vmk)
		return nil, fmt.Errorf("%w: VMK %s is %d bytes", ErrCorrupt, v.GUID, len(vmk))
	}
	return vmk, nil
}

// fvekFromVMK checks the metadata's validation hash with the VMK and
// decrypts the FVEK into the dm-crypt volume key.
func (m *Metadata) fvekFromVMK(vmk []byte) ([]byte, error) {
	h, err := unwrap(&m.validation, vmk)
	if err != nil {
		return nil, fmt.Errorf("%w: the metadata validation datum does not decrypt with the VMK: %v", ErrCorrupt, err)
	}
	le := binary.LittleEndian
	// size, role, type, flags, hash type, unknown, SHA-256.
	if len(h) != 44 || le.Uint16(h[2:]) != 0 || le.Uint16(h[4:]) != 1 || le.Uint16(h[8:]) != 0x2005 {
		return nil, fmt.Errorf("%w: unknown metadata validation datum", ErrUnsupported)
	}
	if [32]byte(h[12:44]) != m.fveHash {
		return nil, fmt.Errorf("%w: FVE metadata authentication failed (the metadata was changed)", ErrCorrupt)
	}
	blob, err := unwrap(m.fvek, vmk)
	if err != nil {
		return nil, fmt.Errorf("%w: the FVEK does not decrypt with the VMK: %v", ErrCorrupt, err)
	}
	defer clear(blob)
	k := blob[keyMetadataLen:]
	want := m.KeyBits / 8
	if m.CipherMode == "cbc-elephant" && want == 32 && len(k) == 64 {
		// AES-128 with the Elephant diffuser stores 512 bits: the CBC key,
		// 16 unused bytes, the diffuser (sector) key, 16 unused bytes.
		// dm-crypt takes the two keys back to back.
		k = append(append([]byte(nil), k[:16]...), k[32:48]...)
		defer clear(k)
	}
	if len(k) != want {
		return nil, fmt.Errorf("%w: the FVEK is %d bytes, %s takes %d", ErrCorrupt, len(k), m.CipherSpec(), want)
	}
	return append([]byte(nil), k...), nil
}

// VolumeKey unlocks the volume key (FVEK in dm-crypt's layout, KeyBits/8
// bytes) with a secret, tried against every VMK it can apply to, as
// cryptsetup does: as a password (UTF-8, hashed as UTF-16LE), as a
// recovery password if it has that form, and as the contents of a
// startup key (.BEK) file made for the VMK. A nil secret opens a
// clear-key VMK (a volume with BitLocker suspended, or never protected).
// It also returns the GUID of the VMK that opened.
func (m *Metadata) VolumeKey(secret []byte) (key []byte, vmkGUID string, err error) {
	// A well-formed recovery password is tried on recovery VMKs first: each
	// attempt costs a million SHA-256 computations.
	order := make([]int, 0, len(m.VMKs))
	_, recovery := RecoveryKey(secret)
	for pass := 0; pass < 2; pass++ {
		for i := range m.VMKs {
			if (recovery && m.VMKs[i].Protection == RecoveryPassword) == (pass == 0) {
				order = append(order, i)
			}
		}
	}
	var last error
	tried := false
	for _, i := range order {
		v := &m.VMKs[i]
		vmk, err := m.openVMK(v, secret)
		if errors.Is(err, errSkip) {
			continue
		}
		tried = true
		if err != nil {
			last = err
			if errors.Is(err, ErrWrongPassphrase) {
				continue
			}
			if v.Protection == StartupKey || v.Protection == ClearKey {
				continue
			}
			return nil, "", err
		}
		key, err := m.fvekFromVMK(vmk)
		clear(vmk)
		if err != nil {
			return nil, "", err
		}
		return key, v.GUID, nil
	}
	if !tried {
		if secret == nil {
			return nil, "", fmt.Errorf("%w: the volume has no clear key; a password, recovery password or startup key is needed", ErrWrongPassphrase)
		}
		for i := range m.VMKs {
			if m.VMKs[i].Protection.supported() && m.VMKs[i].Protection != ClearKey {
				return nil, "", ErrWrongPassphrase
			}
		}
		return nil, "", fmt.Errorf("%w: no VMK is protected by a password, recovery password or startup key (TPM and smart card protectors cannot be used)", ErrUnsupported)
	}
	if last != nil && !errors.Is(last, ErrWrongPassphrase) {
		return nil, "", last
	}
	return nil, "", ErrWrongPassphrase
}

// HasClearKey reports whether a VMK is protected by a clear key, so the
// volume opens without a secret.
func (m *Metadata) HasClearKey() bool {
	for i := range m.VMKs {
		if m.VMKs[i].Protection == ClearKey {
			return true
		}
	}
	return false
}
