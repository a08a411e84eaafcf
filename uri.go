package blkcrypt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
)

// URIDevice is a device reached through a URI (an NBD export, for
// nbd/nbdclient): what Open, Format and the key tools need of it. Sync
// makes acknowledged writes durable on the remote side (NBD_CMD_FLUSH);
// Close syncs and disconnects.
type URIDevice interface {
	io.ReaderAt
	io.WriterAt
	Sync() error
	Size() (int64, error)
	Close() error
}

// URIOpener connects to the device uri names. readOnly asks for a device
// that refuses writes.
type URIOpener func(ctx context.Context, uri string, readOnly bool) (URIDevice, error)

var (
	uriMu      sync.RWMutex
	uriOpeners = map[string]URIOpener{}
)

// RegisterURIScheme makes Open, Format, AddKey, RemoveKey (and the CLI's
// DEVICE arguments) take "scheme://…" through open; a scheme given with
// its colon ("rbd:") takes "scheme:…" instead. A device package registers
// its schemes when it is imported: nbd/nbdclient (nbd, nbds, nbd+unix,
// nbds+unix) and, built with -tags ceph, rbd ("rbd:"); the blkcrypt command
// imports both, the root package neither. A URI
// device is not flock-locked: locks are local and the device is not;
// excluding other writers is the server's business.
func RegisterURIScheme(scheme string, open URIOpener) {
	uriMu.Lock()
	defer uriMu.Unlock()
	uriOpeners[strings.ToLower(scheme)] = open
}

// uriOpener returns the opener for path's scheme, if path is a URI of a
// registered scheme.
func uriOpener(path string) URIOpener {
	uriMu.RLock()
	defer uriMu.RUnlock()
	// A scheme registered with its colon ("rbd:") takes "rbd:REST", the
	// form qemu and rbd write, without the "//".
	if scheme, _, ok := strings.Cut(path, ":"); ok && scheme != "" {
		if open := uriOpeners[strings.ToLower(scheme)+":"]; open != nil {
			return open
		}
	}
	scheme, _, ok := strings.Cut(path, "://")
	if !ok || scheme == "" {
		return nil
	}
	return uriOpeners[strings.ToLower(scheme)]
}

// IsURI reports whether path is a URI of a registered scheme (and so is
// opened through its opener, not as a file).
func IsURI(path string) bool { return uriOpener(path) != nil }

// OpenURI opens the device a URI of a registered scheme names.
func OpenURI(ctx context.Context, uri string, readOnly bool) (URIDevice, error) {
	open := uriOpener(uri)
	if open == nil {
		return nil, fmt.Errorf("%w: %q is not a URI of a registered scheme", ErrInvalidOptions, uri)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	return open(ctx, uri, readOnly)
}

// uriDevice is a URI device with the detached header file (locked) that
// Open keeps until Close.
type uriDevice struct {
	URIDevice
	also        *os.File
	alsoRelease func()
}

func (d *uriDevice) Close() error {
	err := d.URIDevice.Close()
	if d.also != nil {
		d.alsoRelease()
		d.also.Close()
	}
	return err
}

// openURIVolume is Open for a URI device.
func openURIVolume(ctx context.Context, uri string, o OpenOptions) (*Volume, error) {
	dev, err := OpenURI(ctx, uri, o.ReadOnly)
	if err != nil {
		return nil, err
	}
	d := &uriDevice{URIDevice: dev}
	if o.Header != "" {
		if d.also, d.alsoRelease, err = openLocked(o.Header, o.ReadOnly); err != nil {
			dev.Close()
			return nil, err
		}
		o.HeaderDevice = d.also
	}
	v, err := open(ctx, d, dev, uri, o.Header, o)
	if err != nil {
		d.Close()
		return nil, err
	}
	return v, nil
}

// formatURI opens a URI device for Format. size, when set, must fit: a
// remote export cannot be grown from here.
func formatURI(ctx context.Context, uri string, size int64) (URIDevice, error) {
	dev, err := OpenURI(ctx, uri, false)
	if err != nil {
		return nil, err
	}
	if size > 0 {
		have, err := dev.Size()
		if err == nil && have < size {
			err = fmt.Errorf("%w: %s has %d bytes, fewer than the %d asked for (a remote device cannot be grown)", ErrDeviceTooSmall, uri, have, size)
		}
		if err != nil {
			dev.Close()
			return nil, err
		}
	}
	return dev, nil
}

// uriDiscarder returns the Discard of a URI device that has one (NBD TRIM),
// with "not supported" taken as done: discards are advisory.
func uriDiscarder(dev Device) func(off, n int64) error {
	d, ok := dev.(*uriDevice)
	if !ok {
		return nil
	}
	dd, ok := d.URIDevice.(interface{ Discard(off, n int64) error })
	if !ok {
		return nil
	}
	return func(off, n int64) error {
		if err := dd.Discard(off, n); err != nil && !errors.Is(err, errors.ErrUnsupported) {
			return err
		}
		return nil
	}
}

// QueueDepth is the requests in flight per client connection that the
// volume's device asks a server to allow (an rbd: device asks for more, to
// hide its network round trips); 0 leaves it to the server. It is what
// nbd.QueueDepther asks of a backend.
func (v *Volume) QueueDepth() int {
	if !v.usable() {
		return 0
	}
	if q, ok := v.baseDevice().(interface{ QueueDepth() int }); ok {
		return q.QueueDepth()
	}
	return 0
}

// baseDevice is the volume's device without Open's wrapper for a URI
// device, for the optional interfaces the device itself may have.
func (v *Volume) baseDevice() any {
	if d, ok := v.dev.(*uriDevice); ok {
		return d.URIDevice
	}
	return v.dev
}
