package integrity

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"fmt"
	"strings"
)

// journalCrypt is an encrypted journal as the kernel keeps it with a
// stream cipher (create_journal, blocksize 1): the journal on disk is the
// plaintext xored with the cipher's keystream from a zero IV over the
// whole journal (rounded up to 4 KiB pages), and the four commit-id
// constants are xored with the keystream that follows, so that the ids
// give nothing away.
type journalCrypt struct {
	block cipher.Block
	start int64 // byte offset of the journal on the device
	len   int64 // journal bytes
	ids   commitIDs
}

func newJournalCrypt(alg string, key []byte, g *Geometry) (*journalCrypt, error) {
	name := alg
	if a, b, ok := strings.Cut(alg, "-"); ok {
		name = a + "(" + b + ")"
	}
	if name != "ctr(aes)" {
		return nil, fmt.Errorf("%w: journal encryption %q (known: ctr(aes))", ErrUnsupported, alg)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("integrity: journal key: %w", err)
	}
	c := &journalCrypt{block: block, start: SuperblockArea, len: int64(g.JournalSections) * int64(g.SectionSectors) << 9}
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

// keystream xors buf with the keystream at byte offset off (CTR with a
// big-endian counter from a zero IV, as the kernel's ctr template).
func (c *journalCrypt) keystream(buf []byte, off int64) {
	var iv [16]byte
	binary.BigEndian.PutUint64(iv[8:], uint64(off/16))
	s := cipher.NewCTR(c.block, iv[:])
	var skip [16]byte
	s.XORKeyStream(skip[:off%16], skip[:off%16])
	s.XORKeyStream(buf, buf)
}

// crypt xors the part of p (at device offset off) that lies in the
// journal.
func (c *journalCrypt) crypt(p []byte, off int64) {
	lo, hi := max(off, c.start), min(off+int64(len(p)), c.start+c.len)
	if lo < hi {
		c.keystream(p[lo-off:hi-off], lo-c.start)
	}
}

// cryptDev is a device whose journal is encrypted: reads decrypt it,
// writes encrypt it; everything else passes through.
type cryptDev struct {
	Device
	c *journalCrypt
}

func (d *cryptDev) ReadAt(p []byte, off int64) (int, error) {
	n, err := d.Device.ReadAt(p, off)
	d.c.crypt(p[:n], off)
	return n, err
}

func (d *cryptDev) WriteAt(p []byte, off int64) (int, error) {
	q := append([]byte(nil), p...)
	d.c.crypt(q, off)
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
