// Package af implements the LUKS anti-forensic information splitter
// (AFsplit / AFmerge) as LUKS1 and LUKS2 keyslots store it on disk.
//
// A key of n bytes is expanded into stripes·n bytes. Every stripe but the
// last is random; the last is the key XORed with a running buffer that is
// updated, after each random stripe is XORed into it, by the diffuse
// function. Diffuse hashes the buffer in digest-size blocks: block i (the
// last one possibly shorter) is replaced by the first len(block) bytes of
// H(BE32(i) || block). Without every stripe the key cannot be recovered, so
// wiping a few sectors of a keyslot area destroys the key it held.
package af

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
)

// ErrInvalid is returned for a zero key length, a stripe count below one or
// buffers of the wrong size.
var ErrInvalid = errors.New("af: invalid parameters")

// Size returns the number of bytes the split material of a keyLen-byte key
// with the given number of stripes occupies, before any sector padding.
func Size(keyLen, stripes int) int { return keyLen * stripes }

// Sectors returns the number of 512-byte sectors split material occupies on
// disk (cryptsetup's AF_split_sectors): Size rounded up to whole sectors.
func Sectors(keyLen, stripes int) int { return (keyLen*stripes + 511) / 512 }

func check(keyLen, stripes, material int) error {
	if keyLen <= 0 || stripes <= 0 {
		return fmt.Errorf("%w: key length %d, %d stripes", ErrInvalid, keyLen, stripes)
	}
	if keyLen > (1<<31-1)/stripes {
		return fmt.Errorf("%w: %d stripes of %d bytes overflow", ErrInvalid, stripes, keyLen)
	}
	if material < keyLen*stripes {
		return fmt.Errorf("%w: material buffer of %d bytes is shorter than %d", ErrInvalid, material, keyLen*stripes)
	}
	return nil
}

// diffuser hashes blocks in place with one reusable hash state.
type diffuser struct {
	h   hash.Hash
	sum []byte
}

func newDiffuser(newHash func() hash.Hash) *diffuser {
	h := newHash()
	return &diffuser{h: h, sum: make([]byte, 0, h.Size())}
}

// diffuse replaces buf, in digest-size blocks, by the hash of the block
// number (big-endian 32 bits) followed by the block; the last, partial
// block hashes only its own bytes and keeps that many bytes of the digest.
func (d *diffuser) diffuse(buf []byte) {
	ds := d.h.Size()
	var iv [4]byte
	for i := 0; i*ds < len(buf); i++ {
		blk := buf[i*ds : min((i+1)*ds, len(buf))]
		binary.BigEndian.PutUint32(iv[:], uint32(i))
		d.h.Reset()
		d.h.Write(iv[:])
		d.h.Write(blk)
		d.sum = d.h.Sum(d.sum[:0])
		copy(blk, d.sum)
	}
}

func (d *diffuser) wipe() {
	clear(d.sum[:cap(d.sum)])
	d.h.Reset()
}

func xorInto(dst, src []byte) {
	for i := range dst {
		dst[i] ^= src[i]
	}
}

// Split splits key into dst, which must hold at least len(key)·stripes
// bytes (bytes after that are left untouched), using newHash for diffusion
// and rnd (crypto/rand.Reader when nil) for the random stripes.
func Split(dst, key []byte, stripes int, newHash func() hash.Hash, rnd io.Reader) error {
	n := len(key)
	if err := check(n, stripes, len(dst)); err != nil {
		return err
	}
	if rnd == nil {
		rnd = rand.Reader
	}
	d := newDiffuser(newHash)
	defer d.wipe()
	buf := make([]byte, n)
	defer clear(buf)
	for i := 0; i < stripes-1; i++ {
		s := dst[i*n : (i+1)*n]
		if _, err := io.ReadFull(rnd, s); err != nil {
			clear(dst[:i*n])
			return fmt.Errorf("af: reading random stripe: %w", err)
		}
		xorInto(buf, s)
		d.diffuse(buf)
	}
	last := dst[(stripes-1)*n : stripes*n]
	for i := range last {
		last[i] = buf[i] ^ key[i]
	}
	return nil
}

// Merge recovers a key of len(key) bytes from split material src (at least
// len(key)·stripes bytes) into key. It is the inverse of Split.
func Merge(key, src []byte, stripes int, newHash func() hash.Hash) error {
	n := len(key)
	if err := check(n, stripes, len(src)); err != nil {
		return err
	}
	d := newDiffuser(newHash)
	defer d.wipe()
	buf := make([]byte, n)
	defer clear(buf)
	for i := 0; i < stripes-1; i++ {
		xorInto(buf, src[i*n:(i+1)*n])
		d.diffuse(buf)
	}
	last := src[(stripes-1)*n : stripes*n]
	for i := range key {
		key[i] = buf[i] ^ last[i]
	}
	return nil
}
