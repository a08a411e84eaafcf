package bitlk

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/blkcrypt/blkcrypt/internal/volspec"
	"github.com/blkcrypt/blkcrypt/kdf"
	"github.com/blkcrypt/blkcrypt/sector"
)

// A BitLocker volume is not one contiguous dm-crypt segment. cryptsetup
// maps it as several: the first VolumeHeaderSize bytes decrypt the block
// stored at VolumeHeaderOffset (with that block's own IVs), the three FVE
// metadata areas and the original place of that block read as zeros
// (dm-zero), and everything else decrypts in place, every sector's IV being
// its position on the device.
//
// blkcrypt.Volume decrypts one contiguous range with IVs counted from its
// start, which is exactly the "in place" part. So the opener hands it a device
// adapter, layoutDevice, that shows the ciphertext of the logical volume:
// pass-through everywhere except in the few special regions, where it
// serves ciphertext prepared at open time — the volume header re-encrypted
// for its logical position, and encrypted zeros for the metadata areas.
// Reads of the data area cost nothing extra, and the Volume keeps its
// batching, parallel decryption and locking.

// region is one special range of the logical volume, [start, end).
type region struct {
	start, end int64
	// ct is the ciphertext the Volume reads there: for the header region,
	// the stored volume header re-encrypted with logical sector numbers;
	// for a zero region, zeros encrypted likewise.
	ct   []byte
	zero bool // dm-zero: reads give zeros, writes are dropped
}

// layoutDevice presents the BitLocker device as the ciphertext of the
// logical volume. It implements blkcrypt.Device.
type layoutDevice struct {
	dev     volspec.Device
	regions []region // sorted by start, not overlapping
	hdrOff  int64    // where the header region is stored
	c       *sector.Cipher

	mu sync.RWMutex // guards the ct of the header region
}

func (d *layoutDevice) ReadAt(p []byte, off int64) (int, error) {
	done := 0
	for done < len(p) {
		pos := off + int64(done)
		next := int64(-1)
		handled := false
		for i := range d.regions {
			r := &d.regions[i]
			if pos >= r.start && pos < r.end {
				d.mu.RLock()
				n := copy(p[done:], r.ct[pos-r.start:])
				d.mu.RUnlock()
				done += n
				handled = true
				break
			}
			if r.start > pos {
				next = r.start
				break
			}
		}
		if handled {
			continue
		}
		q := p[done:]
		if next >= 0 && int64(len(q)) > next-pos {
			q = q[:next-pos]
		}
		n, err := d.dev.ReadAt(q, pos)
		done += n
		if n < len(q) {
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			return done, err
		}
	}
	return done, nil
}

// WriteAt takes ciphertext the Volume encrypted for logical positions.
// Data-area writes go straight through; header writes are re-encrypted
// for the stored header's position; writes into the metadata areas are
// dropped, as dm-zero drops them.
func (d *layoutDevice) WriteAt(p []byte, off int64) (int, error) {
	done := 0
	for done < len(p) {
		pos := off + int64(done)
		next := int64(-1)
		var in *region
		for i := range d.regions {
			r := &d.regions[i]
			if pos >= r.start && pos < r.end {
				in = r
				break
			}
			if r.start > pos {
				next = r.start
				break
			}
		}
		if in != nil {
			n := int(min(int64(len(p)-done), in.end-pos))
			if !in.zero {
				if err := d.writeHeader(in, p[done:done+n], pos); err != nil {
					return done, err
				}
			}
			done += n
			continue
		}
		q := p[done:]
		if next >= 0 && int64(len(q)) > next-pos {
			q = q[:next-pos]
		}
		n, err := d.dev.WriteAt(q, pos)
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

func (d *layoutDevice) writeHeader(r *region, ct []byte, pos int64) error {
	ss := int64(d.c.SectorSize())
	if pos%ss != 0 || int64(len(ct))%ss != 0 {
		return fmt.Errorf("bitlk: unaligned write of %d bytes at %d into the volume header", len(ct), pos)
	}
	buf := make([]byte, len(ct))
	defer clear(buf)
	if err := d.c.DecryptSectors(buf, ct, uint64(pos/512)); err != nil {
		return err
	}
	phys := d.hdrOff + (pos - r.start)
	if err := d.c.EncryptSectors(buf, buf, uint64(phys/512)); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.dev.WriteAt(buf, phys); err != nil {
		return err
	}
	copy(r.ct[pos-r.start:], ct)
	return nil
}

func (d *layoutDevice) Sync() error { return d.dev.Sync() }

func (d *layoutDevice) Close() error {
	d.mu.Lock()
	for i := range d.regions {
		clear(d.regions[i].ct)
	}
	d.mu.Unlock()
	return d.dev.Close()
}

// Layout describes how the logical volume maps onto the device.
type Layout struct {
	Size int64 // of the logical (decrypted) volume: the device size
	// Header is where the first HeaderSize bytes of the volume are stored.
	HeaderOffset, HeaderSize int64
	// Zero lists the ranges that read as zeros: the FVE metadata areas and
	// the stored header's own place.
	Zero [][2]int64
}

// Layout computes and checks the mapping of a device of devSize bytes.
func (m *Metadata) Layout(devSize int64) (*Layout, error) {
	ss := int64(m.SectorSize)
	l := &Layout{Size: devSize / ss * ss, HeaderOffset: int64(m.VolumeHeaderOffset), HeaderSize: int64(m.VolumeHeaderSize)}
	if m.VolumeHeaderOffset > 1<<62 || m.VolumeHeaderSize > 1<<62 {
		return nil, fmt.Errorf("%w: volume header at %d, %d bytes", ErrCorrupt, m.VolumeHeaderOffset, m.VolumeHeaderSize)
	}
	for _, o := range m.MetadataOffsets {
		if o > 1<<62 {
			return nil, fmt.Errorf("%w: metadata offset %d", ErrCorrupt, o)
		}
		l.Zero = append(l.Zero, [2]int64{int64(o), int64(o) + fveAreaSize})
	}
	l.Zero = append(l.Zero, [2]int64{l.HeaderOffset, l.HeaderOffset + l.HeaderSize})
	if l.HeaderSize <= 0 || l.HeaderSize%ss != 0 || l.HeaderOffset%ss != 0 {
		return nil, fmt.Errorf("%w: volume header at %d, %d bytes, is not whole %d-byte sectors", ErrCorrupt, l.HeaderOffset, l.HeaderSize, ss)
	}
	slices.SortFunc(l.Zero, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	prev := l.HeaderSize
	for _, z := range l.Zero {
		if z[0]%ss != 0 {
			return nil, fmt.Errorf("%w: metadata area at %d is not aligned to the %d-byte sector size", ErrCorrupt, z[0], ss)
		}
		if z[0] < prev {
			return nil, fmt.Errorf("%w: metadata areas and the volume header overlap (at %d)", ErrCorrupt, z[0])
		}
		if z[1] > l.Size {
			return nil, fmt.Errorf("%w: metadata area at %d reaches past the end of the %d-byte device", ErrCorrupt, z[0], l.Size)
		}
		prev = z[1]
	}
	return l, nil
}

func init() {
	volspec.Register(volspec.Format{Name: "bitlk", Detect: Detect, Open: open, Dump: dump})
}

// dump is the dumper blkcrypt.DumpVolume uses: bitlkDump, and with
// d.VolumeKey bitlkDump --dump-volume-key (the key unlocked as open
// unlocks it; with d.KeyFile named instead of printed).
func dump(ctx context.Context, r *volspec.Request, d *volspec.DumpRequest) error {
	m, err := Read(r.Dev)
	if err != nil {
		return err
	}
	if !d.VolumeKey {
		return Dump(d.W, m, d.Device)
	}
	key, err := unlockKey(ctx, m, r)
	if err != nil {
		return err
	}
	defer clear(key)
	if d.SaveKey != nil {
		if err := d.SaveKey(key); err != nil {
			return err
		}
	}
	return DumpVolumeKey(d.W, m, d.Device, key, d.KeyFile)
}

// open is the opener blkcrypt.Open uses: the volume key comes from
// r.VolumeKey, from a clear key (tried first, as cryptsetup does, unless a
// secret is given), or from the secret (r.Passphrase: a password or
// recovery password; or r.KeyFiles[0]: a startup key .BEK file).
func open(ctx context.Context, r *volspec.Request) (*volspec.Spec, error) {
	m, err := Read(r.Dev)
	if err != nil {
		return nil, err
	}
	if err := m.Activatable(); err != nil {
		return nil, err
	}
	key, err := unlockKey(ctx, m, r)
	if err != nil {
		return nil, err
	}
	defer clear(key)
	s, err := describe(r.Dev, r.DevSize, m, key)
	if err != nil {
		return nil, err
	}
	if uint64(r.DevSize) != m.VolumeSize {
		s.Note = fmt.Sprintf("BitLocker volume size %d does not match the underlying device size %d", m.VolumeSize, r.DevSize)
	}
	return s, nil
}

func unlockKey(ctx context.Context, m *Metadata, r *volspec.Request) ([]byte, error) {
	if r.VolumeKey != nil {
		if len(r.VolumeKey) != m.KeyBits/8 {
			return nil, fmt.Errorf("%w: %s takes a %d-bit volume key, not %d bits", volspec.ErrInvalidOptions, m.CipherSpec(), m.KeyBits, len(r.VolumeKey)*8)
		}
		return bytes.Clone(r.VolumeKey), nil
	}
	secret := r.Passphrase
	if len(r.KeyFiles) > 0 {
		secret = r.KeyFiles[0]
	}
	if m.HasClearKey() && len(r.KeyFiles) == 0 {
		if key, _, err := m.VolumeKey(nil); err == nil {
			return key, nil
		}
	}
	// The run keeps its own copy of the secret: the caller wipes its own
	// when Open returns, which may be before an abandoned run ends.
	secret = bytes.Clone(secret)
	return kdf.Run(ctx, func() ([]byte, error) {
		defer clear(secret)
		key, _, err := m.VolumeKey(secret)
		return key, err
	})
}

// describe lays the volume out for the root package: one cipher over the
// device as layoutDevice presents it.
func describe(dev io.ReaderAt, devSize int64, m *Metadata, key []byte) (*volspec.Spec, error) {
	if len(key) != m.KeyBits/8 {
		return nil, fmt.Errorf("%w: %s takes a %d-bit volume key, not %d bits", volspec.ErrInvalidOptions, m.CipherSpec(), m.KeyBits, len(key)*8)
	}
	l, err := m.Layout(devSize)
	if err != nil {
		return nil, err
	}
	c, err := sector.New(m.CipherSpec(), key, sector.Options{SectorSize: m.SectorSize, LargeIV: m.SectorSize != 512})
	if err != nil {
		return nil, fmt.Errorf("%w: bitlk: %w", ErrUnsupported, err)
	}
	var regions []region
	// The stored header, decrypted where it is and encrypted for offset 0.
	hdr := make([]byte, l.HeaderSize)
	if _, err := io.ReadFull(io.NewSectionReader(dev, l.HeaderOffset, l.HeaderSize), hdr); err != nil {
		c.Wipe()
		return nil, fmt.Errorf("bitlk: reading the volume header at %d: %w", l.HeaderOffset, err)
	}
	err = c.DecryptSectors(hdr, hdr, uint64(l.HeaderOffset/512))
	if err == nil {
		err = c.EncryptSectors(hdr, hdr, 0)
	}
	if err != nil {
		c.Wipe()
		return nil, err
	}
	regions = append(regions, region{start: 0, end: l.HeaderSize, ct: hdr})
	for _, z := range l.Zero {
		ct := make([]byte, z[1]-z[0])
		if err := c.EncryptSectors(ct, ct, uint64(z[0]/512)); err != nil {
			c.Wipe()
			return nil, err
		}
		regions = append(regions, region{start: z[0], end: z[1], ct: ct, zero: true})
	}
	return &volspec.Spec{
		Layers: []*sector.Cipher{c},
		Size:   l.Size,
		Wrap: func(dev volspec.Device) volspec.Device {
			return &layoutDevice{dev: dev, regions: regions, hdrOff: l.HeaderOffset, c: c}
		},
	}, nil
}
