package capi

import (
	"crypto/cipher"
	"fmt"
	"slices"
	"strings"
)

// Templates are named as the kernel names them; an instance's driver name is
// the template applied to its inner drivers, e.g. "cbc(aes-aesni)", and it
// inherits the inner driver's priority.

func init() {
	for _, m := range []struct {
		name   string
		iv     bool
		stream bool
		build  func(b cipher.Block) Skcipher
	}{
		{"ecb", false, false, func(b cipher.Block) Skcipher { return ecbMode{b} }},
		{"cbc", true, false, func(b cipher.Block) Skcipher { return cbcMode{b} }},
		{"ctr", true, true, func(b cipher.Block) Skcipher { return ctrMode{b} }},
	} {
		RegisterTemplate(&Template{Name: m.name, Instantiate: func(n *Name, args [][]*Alg) ([]*Alg, error) {
			if err := wantArgs(n, args, TypeCipher); err != nil {
				return nil, err
			}
			var out []*Alg
			for _, c := range args[0] {
				c := c
				a := &Alg{
					Name: n.String(), Driver: m.name + "(" + c.Driver + ")", Priority: c.Priority,
					Type: TypeSkcipher, BlockSize: c.BlockSize, KeySizes: c.KeySizes, Base: c, Inner: []*Alg{c},
					NewSkcipher: func(key []byte) (Skcipher, error) {
						b, err := c.NewCipher(key)
						if err != nil {
							return nil, err
						}
						return m.build(b), nil
					},
				}
				if m.iv {
					a.IVSize = c.BlockSize
				}
				if m.stream {
					a.BlockSize = 1
				}
				out = append(out, a)
			}
			return out, nil
		}})
	}

	RegisterTemplate(&Template{Name: "xts", Instantiate: func(n *Name, args [][]*Alg) ([]*Alg, error) {
		if err := wantArgs(n, args, TypeCipher); err != nil {
			return nil, err
		}
		if err := want16(n, args[0]); err != nil {
			return nil, err
		}
		var out []*Alg
		for _, c := range args[0] {
			c := c
			ks := make([]int, len(c.KeySizes))
			for i, k := range c.KeySizes {
				ks[i] = 2 * k
			}
			out = append(out, &Alg{
				Name: n.String(), Driver: "xts(" + c.Driver + ")", Priority: c.Priority,
				Type: TypeSkcipher, BlockSize: 16, MinLen: 16, IVSize: 16, KeySizes: ks, Base: c, Inner: []*Alg{c},
				NewSkcipher: func(key []byte) (Skcipher, error) {
					h := len(key) / 2
					k1, err := c.NewCipher(key[:h])
					if err != nil {
						return nil, err
					}
					k2, err := c.NewCipher(key[h:])
					if err != nil {
						return nil, err
					}
					return xtsMode{k1, k2}, nil
				},
			})
		}
		return out, nil
	}})

	RegisterTemplate(&Template{Name: "lrw", Instantiate: func(n *Name, args [][]*Alg) ([]*Alg, error) {
		if err := wantArgs(n, args, TypeCipher); err != nil {
			return nil, err
		}
		if err := want16(n, args[0]); err != nil {
			return nil, err
		}
		var out []*Alg
		for _, c := range args[0] {
			c := c
			ks := make([]int, len(c.KeySizes))
			for i, k := range c.KeySizes {
				ks[i] = k + 16
			}
			out = append(out, &Alg{
				Name: n.String(), Driver: "lrw(" + c.Driver + ")", Priority: c.Priority,
				Type: TypeSkcipher, BlockSize: 16, IVSize: 16, KeySizes: ks, Base: c, Inner: []*Alg{c},
				NewSkcipher: func(key []byte) (Skcipher, error) {
					h := len(key) - 16
					b, err := c.NewCipher(key[:h])
					if err != nil {
						return nil, err
					}
					return newLRW(b, key[h:]), nil
				},
			})
		}
		return out, nil
	}})

	RegisterTemplate(&Template{Name: "essiv", Instantiate: instantiateESSIV})
}

func wantArgs(n *Name, args [][]*Alg, types ...Type) error {
	if len(args) != len(types) {
		return fmt.Errorf("%w: %s takes %d argument(s), got %d", ErrInvalidName, n.Ident, len(types), len(args))
	}
	for i, t := range types {
		if args[i][0].Type != t {
			return fmt.Errorf("%w: %s: argument %s is a %s, want a %s", ErrInvalidName, n, n.Args[i], args[i][0].Type, t)
		}
		if bs := args[i][0].BlockSize; t == TypeCipher && bs != 8 && bs != 16 {
			return fmt.Errorf("%w: %s: %s has %d-byte blocks; only 8- and 16-byte block ciphers are supported", ErrInvalidName, n, n.Args[i], bs)
		}
	}
	return nil
}

// want16 refuses a cipher whose block is not 16 bytes, as the kernel's xts
// and lrw do: their tweaks are elements of GF(2^128).
func want16(n *Name, ciphers []*Alg) error {
	if bs := ciphers[0].BlockSize; bs != 16 {
		return fmt.Errorf("%w: %s needs a 16-byte block cipher; %s has %d-byte blocks", ErrInvalidName, n, n.Args[0], bs)
	}
	return nil
}

// essiv(SKCIPHER,HASH): the request IV is replaced by E_{H(key)}(IV), where E
// is the innermost block cipher of SKCIPHER keyed with the whole digest. As
// in the kernel, the digest must be a valid key for that cipher.
func instantiateESSIV(n *Name, args [][]*Alg) ([]*Alg, error) {
	if err := wantArgs(n, args, TypeSkcipher, TypeHash); err != nil {
		return nil, err
	}
	h := args[1][0]
	var out []*Alg
	for _, s := range args[0] {
		if s.Base == nil {
			return nil, fmt.Errorf("%w: %s: %s has no underlying block cipher", ErrInvalidName, n, n.Args[0])
		}
		if s.IVSize != s.Base.BlockSize {
			return nil, fmt.Errorf("%w: %s: the IV of %s is not one cipher block", ErrInvalidName, n, n.Args[0])
		}
		// The IV cipher is the best driver of the base cipher's name that
		// takes the digest as its key.
		ivds, err := resolve(&Name{Ident: s.Base.Name})
		if err != nil {
			return nil, err
		}
		var ivc *Alg
		for _, d := range ivds {
			if d.ValidKeySize(h.DigestSize) && d.SelfTest() == nil {
				ivc = d
				break
			}
		}
		if ivc == nil {
			return nil, fmt.Errorf("%w: %s: %s digest is %d bits, not a valid %s key", ErrInvalidName, n, h.Name, h.DigestSize*8, s.Base.Name)
		}
		s := s
		out = append(out, &Alg{
			Name:     n.String(),
			Driver:   "essiv(" + s.Driver + "," + ivc.Driver + "," + h.Driver + ")",
			Priority: s.Priority, Type: TypeSkcipher, BlockSize: s.BlockSize, MinLen: s.MinLen,
			IVSize: s.IVSize, KeySizes: s.KeySizes, Base: s.Base, Inner: []*Alg{s, ivc, h},
			NewSkcipher: func(key []byte) (Skcipher, error) {
				inner, err := s.Skcipher(key)
				if err != nil {
					return nil, err
				}
				hh := h.NewHash()
				hh.Write(key)
				salt := hh.Sum(nil)
				defer clear(salt)
				ivb, err := ivc.NewCipher(salt)
				if err != nil {
					return nil, err
				}
				return &essivMode{inner: inner, iv: ivb}, nil
			},
		})
	}
	return out, nil
}

// essivMode composes any skcipher with an IV cipher, as the kernel's
// template does: two independent steps, each through its driver.
type essivMode struct {
	inner *Tfm
	iv    cipher.Block
}

// The IV is one block of the IV cipher (instantiateESSIV checks), 8 or 16
// bytes.

func (m *essivMode) Encrypt(dst, src, iv []byte) {
	var e [16]byte
	m.iv.Encrypt(e[:len(iv)], iv)
	m.inner.impl.Encrypt(dst, src, e[:len(iv)])
}

func (m *essivMode) Decrypt(dst, src, iv []byte) {
	var e [16]byte
	m.iv.Encrypt(e[:len(iv)], iv)
	m.inner.impl.Decrypt(dst, src, e[:len(iv)])
}

// EncryptSectors turns every sector number into its ESSIV IV, then hands the
// whole batch to the inner driver, which may process it multi-buffer.
func (m *essivMode) EncryptSectors(dst, src []byte, sectorSize int, ivs []byte) {
	m.encryptIVs(ivs)
	m.inner.EncryptSectors(dst, src, sectorSize, ivs)
}

func (m *essivMode) DecryptSectors(dst, src []byte, sectorSize int, ivs []byte) {
	m.encryptIVs(ivs)
	m.inner.DecryptSectors(dst, src, sectorSize, ivs)
}

// ecbEncrypter is a block cipher with a bulk ECB path.
type ecbEncrypter interface {
	EncryptECB(dst, src []byte)
}

func (m *essivMode) encryptIVs(ivs []byte) {
	if e, ok := m.iv.(ecbEncrypter); ok {
		e.EncryptECB(ivs, ivs)
		return
	}
	bs := m.iv.BlockSize()
	for i := 0; i < len(ivs); i += bs {
		m.iv.Encrypt(ivs[i:i+bs], ivs[i:i+bs])
	}
}

func (m *essivMode) Wipe() {
	m.inner.Wipe()
	wipeBlock(m.iv)
}

// keySizeList formats key sizes in bits, for messages and the speed table.
func keySizeList(ks []int) string {
	s := make([]string, len(ks))
	for i, k := range slices.Clone(ks) {
		s[i] = fmt.Sprint(k * 8)
	}
	return strings.Join(s, "/")
}
