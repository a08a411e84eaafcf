package integrity

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"

	"golang.org/x/crypto/chacha20"
)

// journalCrypt is an encrypted journal as the kernel's create_journal
// keeps it. With a stream cipher (ctr(aes), chacha20) the journal on
// disk is the plaintext xored with the keystream from a zero IV over the
// whole journal (rounded up to 4 KiB pages), and the four commit-id
// constants are xored with the keystream that follows, so that the ids
// give nothing away. With a block cipher (cbc(aes)) each section is
// encrypted on its own, its IV the cipher's encryption (zero IV) of the
// section number (le32, zero-padded to a block); the commit ids are the
// plain constants.
type journalCrypt struct {
	name    string
	block   cipher.Block
	chacha  []byte // chacha20 key
	start   int64  // byte offset of the journal on the device
	len     int64  // journal bytes
	section int64  // bytes of one section
	ids     commitIDs
}

func newJournalCrypt(alg string, key []byte, g *Geometry) (*journalCrypt, error) {
	name := alg
	if a, b, ok := strings.Cut(alg, "-"); ok {
		name = a + "(" + b + ")"
	}
	c := &journalCrypt{name: name, start: SuperblockArea, section: int64(g.SectionSectors) << 9}
	c.len = int64(g.JournalSections) * c.section
	c.ids = plainCommitIDs
	var err error
	switch name {
	case "ctr(aes)", "cbc(aes)":
		c.block, err = aes.NewCipher(key)
	case "chacha20":
		if len(key) != chacha20.KeySize {
			err = fmt.Errorf("a %d-byte key, not %d", chacha20.KeySize, len(key))
		}
		c.chacha = append([]byte(nil), key...)
	default:
		return nil, fmt.Errorf("%w: journal encryption %q (known: ctr(aes), chacha20, cbc(aes))", ErrUnsupported, alg)
	}
	if err != nil {
		return nil, fmt.Errorf("integrity: journal key: %w", err)
	}
	if name == "cbc(aes)" {
		return c, nil
	}
	pages := (c.len + 4095) / 4096 * 4096
	var ids [nCommitIDs * 8]byte
	for i, id := range plainCommitIDs {
		binary.LittleEndian.PutUint64(ids[8*i:], id)
	}
	c.keystream(ids[:], pages)
	for i := range c.ids {
		c.ids[i] = binary.LittleEndian.Uint64(ids[8*i:])
	}
	// As the kernel: ids that collide are incremented until distinct.
	for i := range c.ids {
	retest:
		for j := 0; j < i; j++ {
			if c.ids[j] == c.ids[i] {
				c.ids[i]++
				goto retest
			}
		}
	}
	return c, nil
}

func (c *journalCrypt) stream() bool { return c.name != "cbc(aes)" }

// keystream xors buf with the keystream at byte offset off: CTR with a
// big-endian counter from a zero IV, as the kernel's ctr template; or
// ChaCha20 from a zero IV (the kernel's IV is a le32 block counter and a
// 96-bit nonce).
func (c *journalCrypt) keystream(buf []byte, off int64) {
	if c.chacha != nil {
		s, _ := chacha20.NewUnauthenticatedCipher(c.chacha, make([]byte, chacha20.NonceSize))
		s.SetCounter(uint32(off / 64))
		var skip [64]byte
		s.XORKeyStream(skip[:off%64], skip[:off%64])
		s.XORKeyStream(buf, buf)
		return
	}
	var iv [16]byte
	binary.BigEndian.PutUint64(iv[8:], uint64(off/16))
	s := cipher.NewCTR(c.block, iv[:])
	var skip [16]byte
	s.XORKeyStream(skip[:off%16], skip[:off%16])
	s.XORKeyStream(buf, buf)
}

// sectionIV is a CBC section's IV.
func (c *journalCrypt) sectionIV(section int64) []byte {
	iv := make([]byte, 16)
	binary.LittleEndian.PutUint32(iv, uint32(section))
	c.block.Encrypt(iv, iv)
	return iv
}

// cryptDev is a device whose journal is encrypted: reads decrypt it,
// writes encrypt it; everything else passes through. Journal writes of a
// block cipher must be whole sections (they are: buildSection's).
type cryptDev struct {
	Device
	c *journalCrypt

	mu       sync.Mutex // the last CBC section decrypted, for entry-by-entry reads
	cacheSec int64
	cache    []byte
}

func newCryptDev(dev Device, c *journalCrypt) *cryptDev {
	return &cryptDev{Device: dev, c: c, cacheSec: -1}
}

func (d *cryptDev) ReadAt(p []byte, off int64) (int, error) {
	c := d.c
	lo, hi := max(off, c.start), min(off+int64(len(p)), c.start+c.len)
	if lo >= hi {
		return d.Device.ReadAt(p, off)
	}
	n, err := d.Device.ReadAt(p, off)
	if err != nil {
		return n, err
	}
	if c.stream() {
		c.keystream(p[lo-off:hi-off], lo-c.start)
		return n, nil
	}
	// CBC: decrypt every section the read touches, whole.
	d.mu.Lock()
	defer d.mu.Unlock()
	for s := (lo - c.start) / c.section; s*c.section+c.start < hi; s++ {
		so := c.start + s*c.section
		if d.cacheSec != s {
			if d.cache == nil {
				d.cache = make([]byte, c.section)
			}
			d.cacheSec = -1
			if _, err := d.Device.ReadAt(d.cache, so); err != nil {
				return 0, err
			}
			cipher.NewCBCDecrypter(c.block, c.sectionIV(s)).CryptBlocks(d.cache, d.cache)
			d.cacheSec = s
		}
		a, b := max(so, lo), min(so+c.section, hi)
		copy(p[a-off:b-off], d.cache[a-so:b-so])
	}
	return n, nil
}

func (d *cryptDev) WriteAt(p []byte, off int64) (int, error) {
	c := d.c
	lo, hi := max(off, c.start), min(off+int64(len(p)), c.start+c.len)
	if lo >= hi {
		return d.Device.WriteAt(p, off)
	}
	q := append([]byte(nil), p...)
	if c.stream() {
		c.keystream(q[lo-off:hi-off], lo-c.start)
		return d.Device.WriteAt(q, off)
	}
	if (lo-c.start)%c.section != 0 || (hi-c.start)%c.section != 0 {
		return 0, errors.New("integrity: a write of part of an encrypted journal section")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cacheSec = -1
	for so := lo; so < hi; so += c.section {
		s := (so - c.start) / c.section
		cipher.NewCBCEncrypter(c.block, c.sectionIV(s)).CryptBlocks(q[so-off:so-off+c.section], q[so-off:so-off+c.section])
	}
	return d.Device.WriteAt(q, off)
}

// Size passes the device's size through.
func (d *cryptDev) Size() (int64, error) {
	n, ok := deviceSize(d.Device)
	if !ok {
		return 0, fmt.Errorf("integrity: device size unknown")
	}
	return n, nil
}
