package capi

import (
	"bytes"
	"crypto/subtle"
	"fmt"

	"github.com/blkcrypt/blkcrypt/internal/testmgr"
)

// selfTest runs the known answers for a driver, like the kernel's
// alg_test(). Every vector is run encrypt and decrypt, out of place and in
// place, and for skciphers also through the sector-batch path. A name with no
// vectors passes with a note, as the kernel's "No test for" does; its
// template instances are still tested through their inner drivers.
func selfTest(a *Alg) (string, error) {
	switch a.Type {
	case TypeHash:
		vs, err := testmgr.Hashes(a.Name)
		if err != nil {
			return "", err
		}
		if len(vs) == 0 {
			return selfTestHashConsistency(a)
		}
		for _, v := range vs {
			h := a.NewHash()
			h.Write(v.Input)
			if got := h.Sum(nil); subtle.ConstantTimeCompare(got, v.Digest) != 1 {
				return "", fmt.Errorf("vector %s: digest mismatch", v.ID)
			}
		}
		return fmt.Sprintf("passed (%d vectors)", len(vs)), nil
	case TypeCipher:
		vs, err := testmgr.Ciphers("ecb(" + a.Name + ")")
		if err != nil {
			return "", err
		}
		n := 0
		for _, v := range vs {
			if !a.ValidKeySize(len(v.Key)) {
				continue
			}
			b, err := a.NewCipher(v.Key)
			if err != nil {
				return "", fmt.Errorf("vector %s: %w", v.ID, err)
			}
			buf := make([]byte, len(v.Plaintext))
			bs := a.BlockSize
			if b.BlockSize() != bs {
				return "", fmt.Errorf("cipher has %d-byte blocks, registered as %d", b.BlockSize(), bs)
			}
			if len(buf)%bs != 0 {
				return "", fmt.Errorf("vector %s: %d bytes is not whole %d-byte blocks", v.ID, len(buf), bs)
			}
			for i := 0; i < len(buf); i += bs {
				b.Encrypt(buf[i:i+bs], v.Plaintext[i:i+bs])
			}
			if !bytes.Equal(buf, v.Ciphertext) {
				return "", fmt.Errorf("vector %s: encryption mismatch", v.ID)
			}
			for i := 0; i < len(buf); i += bs {
				b.Decrypt(buf[i:i+bs], buf[i:i+bs])
			}
			if !bytes.Equal(buf, v.Plaintext) {
				return "", fmt.Errorf("vector %s: decryption mismatch", v.ID)
			}
			n++
		}
		if n == 0 {
			return "passed (no vectors)", nil
		}
		return fmt.Sprintf("passed (%d vectors)", n), nil
	case TypeSkcipher:
		vs, err := testmgr.Ciphers(a.Name)
		if err != nil {
			return "", err
		}
		n := 0
		for _, v := range vs {
			if !a.ValidKeySize(len(v.Key)) || len(v.IV) != a.IVSize {
				continue
			}
			if err := testSkcipherVector(a, v); err != nil {
				return "", err
			}
			n++
		}
		if n == 0 {
			return "passed (no vectors)", nil
		}
		return fmt.Sprintf("passed (%d vectors)", n), nil
	}
	return "", fmt.Errorf("unknown type %d", a.Type)
}

func testSkcipherVector(a *Alg, v testmgr.Cipher) error {
	t, err := a.Skcipher(v.Key)
	if err != nil {
		return fmt.Errorf("vector %s: %w", v.ID, err)
	}
	defer t.Wipe()
	iv := bytes.Clone(v.IV)
	out := make([]byte, len(v.Plaintext))
	if err := t.Encrypt(out, v.Plaintext, iv); err != nil {
		return fmt.Errorf("vector %s: %w", v.ID, err)
	}
	if !bytes.Equal(out, v.Ciphertext) {
		return fmt.Errorf("vector %s: encryption mismatch", v.ID)
	}
	if !bytes.Equal(iv, v.IV) {
		return fmt.Errorf("vector %s: encryption modified the IV", v.ID)
	}
	if err := t.Decrypt(out, out, iv); err != nil { // in place
		return fmt.Errorf("vector %s: %w", v.ID, err)
	}
	if !bytes.Equal(out, v.Plaintext) {
		return fmt.Errorf("vector %s: in-place decryption mismatch", v.ID)
	}
	// The batch path: the same request three times, as three "sectors".
	if t.ValidLength(len(v.Plaintext)) && len(v.Plaintext) > 0 {
		n := len(v.Plaintext)
		src := bytes.Repeat(v.Plaintext, 3)
		ivs := bytes.Repeat(v.IV, 3)
		dst := make([]byte, len(src))
		if err := t.EncryptSectors(dst, src, n, ivs); err != nil {
			return fmt.Errorf("vector %s: batch: %w", v.ID, err)
		}
		for i := 0; i < 3; i++ {
			if !bytes.Equal(dst[i*n:(i+1)*n], v.Ciphertext) {
				return fmt.Errorf("vector %s: batch encryption mismatch in request %d", v.ID, i)
			}
		}
		ivs = bytes.Repeat(v.IV, 3)
		if err := t.DecryptSectors(dst, dst, n, ivs); err != nil {
			return fmt.Errorf("vector %s: batch: %w", v.ID, err)
		}
		if !bytes.Equal(dst, src) {
			return fmt.Errorf("vector %s: batch decryption mismatch", v.ID)
		}
	}
	return nil
}

// selfTestHashConsistency checks a hash with no vectors for the basic
// hash.Hash contract, so an obviously broken driver is still caught.
func selfTestHashConsistency(a *Alg) (string, error) {
	h := a.NewHash()
	if h.Size() != a.DigestSize {
		return "", fmt.Errorf("digest size %d, registered as %d", h.Size(), a.DigestSize)
	}
	h.Write([]byte("abc"))
	x := h.Sum(nil)
	h.Reset()
	h.Write([]byte("a"))
	h.Write([]byte("bc"))
	if !bytes.Equal(x, h.Sum(nil)) {
		return "", fmt.Errorf("incremental hashing differs")
	}
	return "passed (no vectors)", nil
}
