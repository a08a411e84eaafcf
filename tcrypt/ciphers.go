package tcrypt

import (
	"crypto/cipher"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/blkcrypt/blkcrypt/capi"
	"golang.org/x/crypto/blowfish"
)

// Modes of a cipher chain, in cryptsetup's spelling.
const (
	ModeXTS  = "xts-plain64" // TrueCrypt 5.0+, VeraCrypt
	ModeLRW  = "lrw-benbi"   // TrueCrypt 4.1-4.3
	ModeTCW  = "cbc-tcw"     // TrueCrypt 1.0-4.0, one cipher
	ModeCBCI = "cbci-tcrypt" // TrueCrypt 1.0-4.0 cascade: one outer CBC over the chain
	ModeCBCT = "cbc-tcrypt"  // TrueCrypt 1.0-4.0 with little-endian Blowfish: inner CBC per cipher
)

// chainAlg is one cipher of a chain: where its key (and XTS tweak key or
// CBC IV seed) sit in the 192 derived bytes or the 256 header key bytes.
type chainAlg struct {
	name      string
	keySize   int // bytes of key given to dm-crypt (XTS: both halves; LRW: with the tweak key)
	ivSize    int // cipher block size
	keyOffset int
	ivOffset  int // XTS tweak key; CBC IV seed
	extra     int // CBC: IV seed + whitening bytes after the key (last cipher only)
}

// Chain is a cipher cascade and its mode.
type Chain struct {
	// Name is cryptsetup's cipher chain name, e.g. "serpent-twofish-aes".
	// The header and the data are decrypted with the last cipher first.
	Name string
	// Mode is the dm-crypt mode and IV, or a legacy pseudo-mode (ModeCBCI,
	// ModeCBCT) that dm-crypt cannot map.
	Mode string
	// KeySize is the volume key size in bytes: the keys of every cipher.
	KeySize int
	// Legacy marks TrueCrypt 1.0-4.0 CBC chains.
	Legacy bool
	algs   []chainAlg
}

// Ciphers lists the chain's ciphers, first to last as in the name.
func (c *Chain) Ciphers() []string {
	var s []string
	for _, a := range c.algs {
		s = append(s, a.name)
	}
	return s
}

func xtsChain(names ...string) Chain {
	n := len(names)
	c := Chain{Name: strings.Join(names, "-"), Mode: ModeXTS, KeySize: 64 * n}
	for i, a := range names {
		c.algs = append(c.algs, chainAlg{a, 64, 16, 32 * i, 32*n + 32*i, 0})
	}
	return c
}

func lrwChain(names ...string) Chain {
	c := Chain{Name: strings.Join(names, "-"), Mode: ModeLRW, KeySize: 48 * len(names)}
	for i, a := range names {
		c.algs = append(c.algs, chainAlg{a, 48, 16, 32 + 32*i, 0, 0})
	}
	return c
}

// cbcChain lays out legacy CBC keys: each cipher key in turn after the
// first 32 bytes (IV seed and whitening); the last cipher carries them.
func cbcChain(mode string, algs ...chainAlg) Chain {
	c := Chain{Mode: mode, Legacy: true}
	off := 32
	var names []string
	for i := range algs {
		a := &algs[i]
		a.keyOffset = off
		off += a.keySize
		names = append(names, a.name)
		c.KeySize += a.keySize
	}
	last := &algs[len(algs)-1]
	last.extra = last.ivSize + 16
	c.KeySize += last.extra
	c.Name = strings.Join(names, "-")
	c.algs = algs
	return c
}

func cbcAlg(name string, keySize, ivSize int) chainAlg {
	return chainAlg{name: name, keySize: keySize, ivSize: ivSize}
}

// Chains is the search order, the same as cryptsetup 2.8's: XTS, LRW, then
// the legacy CBC variants. Blowfish with LRW is left out, as in cryptsetup
// (the kernel's LRW needs 16-byte blocks).
var Chains = func() []Chain {
	cs := []Chain{
		xtsChain("aes"), xtsChain("serpent"), xtsChain("twofish"),
		xtsChain("twofish", "aes"), xtsChain("serpent", "twofish", "aes"),
		xtsChain("aes", "serpent"), xtsChain("aes", "twofish", "serpent"),
		xtsChain("serpent", "twofish"),
		xtsChain("camellia"), xtsChain("kuznyechik"),
		xtsChain("kuznyechik", "camellia"), xtsChain("twofish", "kuznyechik"),
		xtsChain("serpent", "camellia"), xtsChain("aes", "kuznyechik"),
		xtsChain("camellia", "serpent", "kuznyechik"),

		lrwChain("aes"), lrwChain("serpent"), lrwChain("twofish"),
		lrwChain("twofish", "aes"), lrwChain("serpent", "twofish", "aes"),
		lrwChain("aes", "serpent"), lrwChain("aes", "twofish", "serpent"),
		lrwChain("serpent", "twofish"),
	}
	b := func(n string) chainAlg { return cbcAlg(n, 32, 16) }
	cs = append(cs,
		cbcChain(ModeTCW, b("aes")), cbcChain(ModeTCW, b("serpent")), cbcChain(ModeTCW, b("twofish")),
		cbcChain(ModeCBCI, b("twofish"), b("aes")),
		cbcChain(ModeCBCI, b("serpent"), b("twofish"), b("aes")),
		cbcChain(ModeCBCI, b("aes"), b("serpent")),
		cbcChain(ModeCBCI, b("aes"), b("twofish"), b("serpent")),
		cbcChain(ModeCBCI, b("serpent"), b("twofish")),
		cbcChain(ModeTCW, cbcAlg("cast5", 16, 8)),
		cbcChain(ModeTCW, cbcAlg("des3_ede", 24, 8)),
		cbcChain(ModeCBCT, cbcAlg("blowfish_le", 56, 8)),
		cbcChain(ModeCBCT, cbcAlg("blowfish_le", 56, 8), b("aes")),
		cbcChain(ModeCBCT, b("serpent"), cbcAlg("blowfish_le", 56, 8), b("aes")),
	)
	return cs
}()

// LookupChain finds a chain by name and mode.
func LookupChain(name, mode string) (*Chain, error) {
	for i := range Chains {
		if Chains[i].Name == name && Chains[i].Mode == mode {
			return &Chains[i], nil
		}
	}
	return nil, fmt.Errorf("%w: cipher chain %s-%s", ErrUnsupported, name, mode)
}

// blockCipher makes one cipher for header decryption: the crypto API's
// ciphers (CAST5 and 3DES among them), and Blowfish, which it lacks here.
func blockCipher(name string, key []byte) (cipher.Block, error) {
	switch name {
	case "blowfish":
		return blowfish.NewCipher(key)
	case "blowfish_le":
		c, err := blowfish.NewCipher(key)
		if err != nil {
			return nil, err
		}
		return blowfishLE{c}, nil
	}
	return capi.NewCipher(name, key)
}

// blowfishLE is TrueCrypt's little-endian Blowfish: each 32-bit half is
// byte-swapped around the (big-endian) cipher.
type blowfishLE struct{ c *blowfish.Cipher }

func (b blowfishLE) BlockSize() int { return 8 }

func swapHalves(dst, src []byte) {
	binary.LittleEndian.PutUint32(dst[0:], binary.BigEndian.Uint32(src[0:]))
	binary.LittleEndian.PutUint32(dst[4:], binary.BigEndian.Uint32(src[4:]))
}

func (b blowfishLE) Encrypt(dst, src []byte) {
	var t [8]byte
	swapHalves(t[:], src)
	b.c.Encrypt(t[:], t[:])
	swapHalves(dst, t[:])
}

func (b blowfishLE) Decrypt(dst, src []byte) {
	var t [8]byte
	swapHalves(t[:], src)
	b.c.Decrypt(t[:], t[:])
	swapHalves(dst, t[:])
}

// removeWhitening XORs the 8 whitening bytes at key[8:16] over buf.
func removeWhitening(buf, key []byte) {
	for j := range buf {
		buf[j] ^= key[8+j%8]
	}
}

// dmKey is the dm-crypt key of one cipher of the chain, taken from key
// (the 192 derived bytes for the header, the 256 header bytes for data):
// XTS: cipher key || tweak key; LRW: cipher key || the shared 16-byte
// tweak key at 0; CBC: cipher key || IV seed and whitening.
func (a *chainAlg) dmKey(mode string, key []byte) []byte {
	switch {
	case strings.HasPrefix(mode, "xts"):
		h := a.keySize / 2
		return append(append(make([]byte, 0, a.keySize), key[a.keyOffset:a.keyOffset+h]...), key[a.ivOffset:a.ivOffset+h]...)
	case strings.HasPrefix(mode, "lrw"):
		h := a.keySize - 16
		return append(append(make([]byte, 0, a.keySize), key[a.keyOffset:a.keyOffset+h]...), key[:16]...)
	default:
		out := append(make([]byte, 0, a.keySize+a.extra), key[a.keyOffset:a.keyOffset+a.keySize]...)
		return append(out, key[a.ivOffset:a.ivOffset+a.extra]...)
	}
}

// decryptHeader decrypts the 448-byte buf in place with the chain keyed by
// the derived key dk.
func (c *Chain) decryptHeader(buf, dk []byte) error {
	if c.Mode == ModeCBCI {
		return c.decryptCBCI(buf, dk)
	}
	for j := len(c.algs) - 1; j >= 0; j-- {
		if err := c.algs[j].decryptHeader(c.Mode, buf, dk); err != nil {
			return err
		}
	}
	return nil
}

func (a *chainAlg) decryptHeader(mode string, buf, dk []byte) error {
	switch {
	case strings.HasPrefix(mode, "xts"), strings.HasPrefix(mode, "lrw"):
		m := mode[:3]
		iv := make([]byte, 16)
		if m == "lrw" {
			iv[15] = 1
		}
		k := a.dmKey(mode, dk)
		defer clear(k)
		t, err := capi.NewSkcipher(m+"("+a.name+")", k)
		if err != nil {
			return fmt.Errorf("%w: %s(%s): %w", ErrUnsupported, m, a.name, err)
		}
		defer t.Wipe()
		return t.Decrypt(buf, buf, iv)
	}
	// CBC: whitening, then CBC with the IV seed as IV.
	removeWhitening(buf, dk)
	b, err := blockCipher(a.name, dk[a.keyOffset:a.keyOffset+a.keySize])
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrUnsupported, a.name, err)
	}
	cipher.NewCBCDecrypter(b, dk[a.ivOffset:a.ivOffset+a.ivSize]).CryptBlocks(buf, buf)
	return nil
}

// decryptCBCI is TrueCrypt's outer CBC: one CBC pass whose block cipher is
// the whole chain (last cipher first when decrypting).
func (c *Chain) decryptCBCI(buf, dk []byte) error {
	removeWhitening(buf, dk)
	bs := c.algs[0].ivSize
	bcs := make([]cipher.Block, len(c.algs))
	for j, a := range c.algs {
		b, err := blockCipher(a.name, dk[a.keyOffset:a.keyOffset+a.keySize])
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrUnsupported, a.name, err)
		}
		bcs[j] = b
	}
	iv := make([]byte, bs)
	copy(iv, dk[c.algs[0].ivOffset:c.algs[0].ivOffset+bs])
	old := make([]byte, bs)
	for i := 0; i+bs <= len(buf); i += bs {
		blk := buf[i : i+bs]
		copy(old, blk)
		for j := len(bcs) - 1; j >= 0; j-- {
			bcs[j].Decrypt(blk, blk)
		}
		subtle_xor(blk, iv)
		copy(iv, old)
	}
	return nil
}
