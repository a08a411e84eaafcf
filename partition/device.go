package partition

import (
	"fmt"
	"io"
	"io/fs"
	"sync"
)

// DeviceOptions tune Open.
type DeviceOptions struct {
	// ReadOnly refuses writes (ErrReadOnly) even when the disk takes
	// them. A disk that is no io.WriterAt is read-only anyway.
	ReadOnly bool
	// CloseDisk makes Close close the disk too, when it is an io.Closer;
	// by default the caller keeps the disk and closes it itself, so that
	// several partitions of one disk can be open at once.
	CloseDisk bool
}

// Device is one partition as a device of its own: offset 0 is the
// partition's first byte and Size its length. Every read and write is
// checked against the partition's bounds, so nothing outside it can be
// read or changed through a Device. It has the shape of
// blkcrypt.URIDevice (io.ReaderAt, io.WriterAt, Sync, Size, Close) and is
// safe for concurrent use.
//
// A Device takes no lock of its own: locking the disk (as cryptsetup
// locks a device) is the caller's, on the file behind Disk.
type Device struct {
	mu     sync.RWMutex // held shared by I/O, exclusive by Close
	closed bool
	disk   io.ReaderAt
	w      io.WriterAt // nil when read-only
	p      Partition
	o      DeviceOptions
}

// Open returns the partition p of disk as a Device. p is normally from
// Table.Partitions or Table.Find; it must be a non-empty byte range, and
// not an extended MBR partition (a container of EBRs and logical
// partitions, whose writes would cut the chain). Open does not check p
// against the disk's size (an io.ReaderAt does not tell it);
// Table.Open does.
func Open(disk io.ReaderAt, p Partition, o DeviceOptions) (*Device, error) {
	if disk == nil {
		return nil, fmt.Errorf("%w: nil disk", ErrInvalid)
	}
	if p.Start < 0 || p.Size <= 0 || p.Start > (1<<63-1)-p.Size {
		return nil, fmt.Errorf("%w: partition %d is no range of bytes (start %d, size %d)", ErrInvalid, p.Number, p.Start, p.Size)
	}
	if p.Extended {
		return nil, fmt.Errorf("%w: partition %d is an extended partition, a container of logical partitions, not a volume", ErrInvalid, p.Number)
	}
	d := &Device{disk: disk, p: p, o: o}
	if w, ok := disk.(io.WriterAt); ok && !o.ReadOnly {
		d.w = w
	}
	return d, nil
}

// Open finds the partition sel selects (as Find) and opens it on disk,
// which must be the device t was read from; a partition reaching past
// t.DiskSize is refused.
func (t *Table) Open(disk io.ReaderAt, sel string, o DeviceOptions) (*Device, error) {
	p, err := t.Find(sel)
	if err != nil {
		return nil, err
	}
	if p.End() > t.DiskSize {
		return nil, fmt.Errorf("%w: partition %d ends at byte %d, past the %d-byte device", ErrCorrupt, p.Number, p.End(), t.DiskSize)
	}
	return Open(disk, p, o)
}

// Partition returns the partition the device is.
func (d *Device) Partition() Partition { return d.p }

// Disk returns the device the partition is on (to lock it, or to read
// the table again).
func (d *Device) Disk() io.ReaderAt { return d.disk }

// ReadOnly reports whether writes are refused.
func (d *Device) ReadOnly() bool { return d.w == nil }

func (d *Device) String() string {
	return fmt.Sprintf("partition %d (%d bytes at %d)", d.p.Number, d.p.Size, d.p.Start)
}

func (d *Device) closedErr(op string) error {
	return fmt.Errorf("partition %d: %s: %w", d.p.Number, op, fs.ErrClosed)
}

// ReadAt reads len(b) bytes at off within the partition. As with a file,
// a read at or past the end returns 0 and io.EOF, and a read that
// reaches past the end returns the bytes before the end and io.EOF: the
// bytes after the partition are never read. A negative offset is
// ErrOutOfRange. A disk shorter than the partition is
// io.ErrUnexpectedEOF.
func (d *Device) ReadAt(b []byte, off int64) (int, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return 0, d.closedErr("read")
	}
	if off < 0 {
		return 0, fmt.Errorf("%w: partition %d: read at negative offset %d", ErrOutOfRange, d.p.Number, off)
	}
	if off >= d.p.Size {
		if len(b) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	var eof error
	if rest := d.p.Size - off; int64(len(b)) > rest {
		b, eof = b[:rest], io.EOF
	}
	n, err := d.disk.ReadAt(b, d.p.Start+off)
	if n == len(b) {
		return n, eof
	}
	if err == nil || err == io.EOF {
		err = fmt.Errorf("partition %d: the disk ends at byte %d, inside the partition: %w", d.p.Number, d.p.Start+off+int64(n), io.ErrUnexpectedEOF)
	}
	return n, err
}

// WriteAt writes len(b) bytes at off within the partition. A write that
// does not lie wholly inside the partition is refused whole
// (ErrOutOfRange), before anything is written.
func (d *Device) WriteAt(b []byte, off int64) (int, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return 0, d.closedErr("write")
	}
	if d.w == nil {
		return 0, fmt.Errorf("%w: partition %d", ErrReadOnly, d.p.Number)
	}
	if off < 0 || off > d.p.Size || int64(len(b)) > d.p.Size-off {
		return 0, fmt.Errorf("%w: partition %d: %d bytes at offset %d, partition size %d", ErrOutOfRange, d.p.Number, len(b), off, d.p.Size)
	}
	return d.w.WriteAt(b, d.p.Start+off)
}

// Size returns the partition's size in bytes.
func (d *Device) Size() (int64, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return 0, d.closedErr("size")
	}
	return d.p.Size, nil
}

// Sync calls the disk's Sync (an *os.File's fsync, an NBD flush) when it
// has one. A disk without Sync has nothing this package could flush, and
// Sync returns nil: the Device buffers nothing itself.
func (d *Device) Sync() error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return d.closedErr("sync")
	}
	if s, ok := d.disk.(interface{ Sync() error }); ok && d.w != nil {
		if err := s.Sync(); err != nil {
			return fmt.Errorf("partition %d: sync: %w", d.p.Number, err)
		}
	}
	return nil
}

// Close ends the Device: later calls return an error wrapping
// fs.ErrClosed, and a second Close too. It waits for reads and writes in
// progress, then syncs a writable disk (as blkcrypt.URIDevice's Close
// does, so that writes acknowledged before Close are durable). The disk
// is closed only with DeviceOptions.CloseDisk, and then only if it is an
// io.Closer.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return d.closedErr("close")
	}
	d.closed = true
	var err error
	if s, ok := d.disk.(interface{ Sync() error }); ok && d.w != nil {
		if e := s.Sync(); e != nil {
			err = fmt.Errorf("partition %d: sync: %w", d.p.Number, e)
		}
	}
	if c, ok := d.disk.(io.Closer); ok && d.o.CloseDisk {
		if e := c.Close(); e != nil && err == nil {
			err = fmt.Errorf("partition %d: closing the disk: %w", d.p.Number, e)
		}
	}
	return err
}
