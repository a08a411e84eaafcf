package sector

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/blkcrypt/blkcrypt/capi"
)

// Sentinel errors.
var (
	// ErrInvalidSpec means the cipher specification does not parse or names
	// something that does not exist.
	ErrInvalidSpec = errors.New("invalid cipher specification")
	// ErrUnsupported means the specification is valid for dm-crypt but needs
	// something blkcrypt does not provide (integrity metadata for "random").
	ErrUnsupported = errors.New("unsupported cipher specification")
	// ErrInvalidKey means the key has the wrong length for the spec.
	ErrInvalidKey = errors.New("invalid key")
	// ErrInvalidOptions means a bad sector size or IV offset.
	ErrInvalidOptions = errors.New("invalid sector options")
	// ErrInvalidRequest means a request that is not whole sectors, or a
	// first sector not aligned to the sector size.
	ErrInvalidRequest = errors.New("invalid sector request")
)

// Options are the dm-crypt table parameters besides cipher and key.
type Options struct {
	// SectorSize is the encryption unit: 512 (default), 1024, 2048 or 4096.
	SectorSize int
	// IVOffset is added to every sector number before the IV is made
	// (dm-crypt's iv_offset, cryptsetup's --skip), in 512-byte units. It
	// must be a multiple of SectorSize/512.
	IVOffset uint64
	// LargeIV makes IV sector numbers count SectorSize units instead of
	// 512-byte units (dm-crypt's iv_large_sectors). LUKS2 never sets it.
	LargeIV bool
	// Engine overrides the default engine.
	Engine *Engine
}

// Cipher is a keyed dm-crypt sector cipher: a transform, an IV generator
// and a sector geometry. It is safe for concurrent use.
type Cipher struct {
	spec   *Spec
	opts   Options
	shift  uint // log2(SectorSize/512)
	tfms   []*capi.Tfm
	ivSize int
	iv     ivGen
	data   dataMode // lmk, tcw, elephant: modes that touch the data too
	engine *Engine
	// threshold caches the engine's measured break-even for this cipher
	// (0: not yet known).
	threshold atomic.Int64
	// p64 is the driver's by-value IV form when the IV is plain64 or plain
	// (ivMask keeps plain's 32 bits) and one key serves every sector: the
	// single-sector path then hands the sector number straight to the driver.
	p64    capi.Plain64Skcipher
	ivMask uint64 // plain's 32 bits, or all 64
	// spare is a one-slot cache of IV scratch in front of ivPool: an
	// uncontended atomic swap costs less than the pool's per-P pinning,
	// which shows on single-sector requests.
	spare atomic.Pointer[ivBuf]
	// encGroup is how many sectors the encryption kernel works on side by
	// side (CBC encryption is serial within a sector, so the AES kernels
	// interleave 16 sectors, 32 on Zen 5: aes.CBCEncryptGroup). The engine splits batches in multiples
	// of it: a lone leftover sector costs as long as a full group.
	encGroup int
}

func (c *Cipher) getIVBuf() *ivBuf {
	if b := c.spare.Swap(nil); b != nil {
		return b
	}
	return ivPool.Get().(*ivBuf)
}

func (c *Cipher) putIVBuf(b *ivBuf) {
	if !c.spare.CompareAndSwap(nil, b) {
		ivPool.Put(b)
	}
}

// ivGen writes count IVs of ivSize bytes for IV sector numbers n, n+step, …
type ivGen interface {
	generate(ivs []byte, ivSize int, n, step uint64, count int)
}

// dataMode is implemented by IV modes that derive the IV from, or change,
// the sector data. They run one sector at a time, as in dm-crypt.
type dataMode interface {
	encrypt(c *Cipher, tfm *capi.Tfm, dst, src []byte, ivSector uint64) error
	decrypt(c *Cipher, tfm *capi.Tfm, dst, src []byte, ivSector uint64) error
	wipe()
}

// extraKey is implemented by data modes that take key material after the
// subkeys (tcw's IV seed and whitening, lmk v3's seed).
type extraKeyMode interface {
	extraKeySize(spec *Spec, keyLen int) int
}

// New makes a sector cipher from a dm-crypt cipher spec and the volume key.
func New(spec string, key []byte, opts Options) (*Cipher, error) {
	s, err := ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	return NewFromSpec(s, key, opts)
}

// NewFromSpec is New with a parsed spec.
func NewFromSpec(s *Spec, key []byte, opts Options) (*Cipher, error) {
	if opts.SectorSize == 0 {
		opts.SectorSize = 512
	}
	c := &Cipher{spec: s, opts: opts, engine: opts.Engine, encGroup: 1}
	if strings.HasPrefix(s.CAPI, "cbc(") || strings.HasPrefix(s.CAPI, "essiv(cbc(") {
		c.encGroup = 16
	}
	switch opts.SectorSize {
	case 512, 1024, 2048, 4096:
	default:
		return nil, fmt.Errorf("%w: sector size %d is not 512, 1024, 2048 or 4096", ErrInvalidOptions, opts.SectorSize)
	}
	for 512<<c.shift < opts.SectorSize {
		c.shift++
	}
	if opts.IVOffset&(1<<c.shift-1) != 0 {
		return nil, fmt.Errorf("%w: iv offset %d is not a multiple of %d (sector size %d in 512-byte units)", ErrInvalidOptions, opts.IVOffset, 1<<c.shift, opts.SectorSize)
	}
	if c.engine == nil {
		c.engine = DefaultEngine()
	}

	alg, err := capi.Lookup(s.CAPI)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidSpec, s, err)
	}
	if alg.Type != capi.TypeSkcipher {
		return nil, fmt.Errorf("%w: %s: %s is not a length-preserving cipher", ErrInvalidSpec, s, s.CAPI)
	}
	if !validLen(alg, opts.SectorSize) {
		return nil, fmt.Errorf("%w: %s cannot encrypt %d-byte sectors", ErrInvalidOptions, s.CAPI, opts.SectorSize)
	}
	c.ivSize = alg.IVSize

	if err := c.setupIV(alg, key); err != nil {
		return nil, err
	}
	extra := 0
	if e, ok := c.data.(extraKeyMode); ok {
		extra = e.extraKeySize(s, len(key))
	}
	if len(key) <= extra || (len(key)-extra)%s.KeyCount != 0 {
		return nil, fmt.Errorf("%w: a %d-bit key cannot be split into %d subkeys for %s", ErrInvalidKey, len(key)*8, s.KeyCount, s)
	}
	sub := (len(key) - extra) / s.KeyCount
	if !alg.ValidKeySize(sub) {
		return nil, fmt.Errorf("%w: %s takes a %s-bit key, not %d bits", ErrInvalidKey, s, bitsList(alg.KeySizes, s.KeyCount, extra), len(key)*8)
	}
	for i := 0; i < s.KeyCount; i++ {
		t, err := alg.Skcipher(key[i*sub : (i+1)*sub])
		if err != nil {
			c.Wipe()
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalidKey, s, err)
		}
		c.tfms = append(c.tfms, t)
	}
	if err := c.keyIV(alg, key, sub); err != nil {
		c.Wipe()
		return nil, err
	}
	if len(c.tfms) == 1 && c.data == nil {
		switch c.iv.(type) {
		case ivPlain64:
			c.p64, c.ivMask = c.tfms[0].UncheckedPlain64(), ^uint64(0)
		case ivPlain:
			c.p64, c.ivMask = c.tfms[0].UncheckedPlain64(), 1<<32-1
		}
	}
	return c, nil
}

func validLen(a *capi.Alg, n int) bool {
	if a.MinLen > 0 {
		return n >= a.MinLen
	}
	return n%a.BlockSize == 0
}

func bitsList(sizes []int, count, extra int) string {
	s := ""
	for i, k := range sizes {
		if i > 0 {
			s += "/"
		}
		s += fmt.Sprint((k*count + extra) * 8)
	}
	return s
}

// Spec returns the parsed cipher spec.
func (c *Cipher) Spec() *Spec { return c.spec }

// SectorSize returns the encryption unit in bytes.
func (c *Cipher) SectorSize() int { return c.opts.SectorSize }

// Driver names the capi driver doing the work.
func (c *Cipher) Driver() string { return c.tfms[0].Alg().Driver }

// Engine returns the engine that dispatches this cipher's batches.
func (c *Cipher) Engine() *Engine { return c.engine }

// Wipe zeroes the key material held by the cipher. It must not be used
// afterwards.
func (c *Cipher) Wipe() {
	for _, t := range c.tfms {
		t.Wipe()
	}
	if c.data != nil {
		c.data.wipe()
	}
	if w, ok := c.iv.(interface{ wipe() }); ok {
		w.wipe()
	}
}

func (c *Cipher) check(dst, src []byte, first uint64) error {
	ss := c.opts.SectorSize
	if len(src)&(ss-1) != 0 { // ss is a power of two
		return fmt.Errorf("%w: %d bytes is not a whole number of %d-byte sectors", ErrInvalidRequest, len(src), ss)
	}
	if len(dst) < len(src) {
		return fmt.Errorf("%w: destination is %d bytes, source %d", ErrInvalidRequest, len(dst), len(src))
	}
	if capi.InexactOverlap(dst[:len(src)], src) {
		return fmt.Errorf("%w: destination partly overlaps source", ErrInvalidRequest)
	}
	if first&(1<<c.shift-1) != 0 {
		return fmt.Errorf("%w: sector %d is not aligned to the %d-byte sector size", ErrInvalidRequest, first, ss)
	}
	return nil
}

// EncryptSectors encrypts whole sectors from src into dst (in place when
// they are the same slice). firstSector is the position of src[0] on the
// device in 512-byte units, relative to the start of the encrypted data, as
// dm-crypt counts it; it must be aligned to the sector size.
func (c *Cipher) EncryptSectors(dst, src []byte, firstSector uint64) error {
	if n, ok := c.plain64(dst, src, firstSector); ok {
		c.p64.EncryptPlain64(dst[:len(src)], src, n)
		return nil
	}
	return c.sectors(dst, src, firstSector, true, true)
}

// EncryptSectorsInline is EncryptSectors on the calling goroutine alone,
// never split across the engine's workers: for a caller whose other
// requests in flight already keep the cores busy, where a split only adds
// hand-offs and polling (see blkcrypt's Volume).
func (c *Cipher) EncryptSectorsInline(dst, src []byte, firstSector uint64) error {
	if n, ok := c.plain64(dst, src, firstSector); ok {
		c.p64.EncryptPlain64(dst[:len(src)], src, n)
		return nil
	}
	return c.sectors(dst, src, firstSector, true, false)
}

// sectors is the rest of the four after plain64's fast path.
func (c *Cipher) sectors(dst, src []byte, firstSector uint64, enc, split bool) error {
	if err := c.check(dst, src, firstSector); err != nil {
		return err
	}
	if len(src) == c.opts.SectorSize && c.data == nil && len(c.tfms) == 1 {
		return c.one(dst, src, firstSector, enc)
	}
	if !split {
		return c.crypt(dst[:len(src)], src, firstSector, enc)
	}
	return c.engine.run(c, dst[:len(src)], src, firstSector, enc)
}

// plain64 is the single-sector path of drivers that take the IV by value:
// it reports whether the request is one valid sector for it (everything
// check and Tfm would check), and the IV number. It is
// what a small random I/O pays, so it is kept to a few comparisons.
func (c *Cipher) plain64(dst, src []byte, first uint64) (uint64, bool) {
	ss := c.opts.SectorSize
	if c.p64 == nil || len(src) != ss || len(dst) < ss || first&(1<<c.shift-1) != 0 {
		return 0, false
	}
	if capi.InexactOverlap(dst[:ss], src) {
		return 0, false // the checked path reports it
	}
	return c.ivSector(first) & c.ivMask, true
}

// ivSector is the IV sector number of the sector at first (512-byte units).
func (c *Cipher) ivSector(first uint64) uint64 {
	n := c.opts.IVOffset + first
	if c.opts.LargeIV {
		n >>= c.shift
	}
	return n
}

// one is the single-sector path of the other drivers: no engine, no
// batching loop.
func (c *Cipher) one(dst, src []byte, first uint64, enc bool) error {
	n := c.ivSector(first)
	buf := c.getIVBuf()
	ivs := buf[:c.ivSize]
	c.iv.generate(ivs, c.ivSize, n, 1, 1)
	var err error
	if enc {
		err = c.tfms[0].EncryptSectors(dst[:len(src)], src, len(src), ivs)
	} else {
		err = c.tfms[0].DecryptSectors(dst[:len(src)], src, len(src), ivs)
	}
	c.putIVBuf(buf)
	return err
}

// DecryptSectors is the inverse of EncryptSectors.
func (c *Cipher) DecryptSectors(dst, src []byte, firstSector uint64) error {
	if n, ok := c.plain64(dst, src, firstSector); ok {
		c.p64.DecryptPlain64(dst[:len(src)], src, n)
		return nil
	}
	return c.sectors(dst, src, firstSector, false, true)
}

// DecryptSectorsInline is the inverse of EncryptSectorsInline.
func (c *Cipher) DecryptSectorsInline(dst, src []byte, firstSector uint64) error {
	if n, ok := c.plain64(dst, src, firstSector); ok {
		c.p64.DecryptPlain64(dst[:len(src)], src, n)
		return nil
	}
	return c.sectors(dst, src, firstSector, false, false)
}

// maxBatch is how many sectors share one IV scratch buffer.
const maxBatch = 256

type ivBuf [maxBatch * 32]byte

var ivPool = sync.Pool{New: func() any { return new(ivBuf) }}

// crypt does the work inline, in the caller's goroutine: IVs for up to
// maxBatch sectors at a time, then one batch call into the driver.
func (c *Cipher) crypt(dst, src []byte, first uint64, enc bool) error {
	ss := c.opts.SectorSize
	n := len(src) / ss
	s := c.opts.IVOffset + first // 512-byte units, for key choice
	step := uint64(1) << c.shift
	ivN, ivStep := s, step
	if c.opts.LargeIV {
		ivN, ivStep = s>>c.shift, 1
	}
	if c.data != nil || len(c.tfms) > 1 {
		for i := 0; i < n; i++ {
			t := c.tfms[(s+uint64(i)*step)&uint64(len(c.tfms)-1)]
			d, sr := dst[i*ss:(i+1)*ss], src[i*ss:(i+1)*ss]
			ivn := ivN + uint64(i)*ivStep
			if c.data != nil {
				var err error
				if enc {
					err = c.data.encrypt(c, t, d, sr, ivn)
				} else {
					err = c.data.decrypt(c, t, d, sr, ivn)
				}
				if err != nil {
					return err
				}
				continue
			}
			var iv [32]byte
			c.iv.generate(iv[:c.ivSize], c.ivSize, ivn, 1, 1)
			var err error
			if enc {
				err = t.Encrypt(d, sr, iv[:c.ivSize])
			} else {
				err = t.Decrypt(d, sr, iv[:c.ivSize])
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	buf := c.getIVBuf()
	defer c.putIVBuf(buf)
	t := c.tfms[0]
	for i := 0; i < n; i += maxBatch {
		k := min(maxBatch, n-i)
		ivs := buf[:k*c.ivSize]
		c.iv.generate(ivs, c.ivSize, ivN+uint64(i)*ivStep, ivStep, k)
		d, sr := dst[i*ss:(i+k)*ss], src[i*ss:(i+k)*ss]
		var err error
		if enc {
			err = t.EncryptSectors(d, sr, ss, ivs)
		} else {
			err = t.DecryptSectors(d, sr, ss, ivs)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
