//go:build linux

package sector

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The AF_ALG offload engine: the same dm-crypt sector semantics as Cipher,
// with the transform run by the kernel's crypto API through AF_ALG sockets,
// and so by whatever driver the kernel picks for the name (a hardware
// engine such as CAAM, qce, talitos or QAT on boards that have one).
//
// Every AF_ALG request costs system calls and copies, so small batches are
// slower there than in-process: an AFALGCipher measures, on first use, the
// batch size from which the kernel wins, and runs smaller batches with the
// in-process drivers (the seed 004 mechanism, like Engine's break-even for
// going parallel).
//
// The skcipher interface takes one IV per request, and kernel 6.1's
// algif_skcipher keeps a single IV per socket (an asynchronous request uses
// it by reference), so requests on one socket cannot be pipelined. A batch
// therefore becomes one sendmsg (ALG_SET_OP, ALG_SET_IV and the sector's
// data) and one read per sector, except without an IV (ecb), where up to
// 64 KiB of sectors go in one request; and a large batch is split into
// contiguous parts, one per operation socket of a pool, run concurrently.

// ErrNoAFALG means the kernel offers no AF_ALG sockets (not Linux, not
// built, or the af_alg/algif_skcipher modules are not loaded).
var ErrNoAFALG = errors.New("AF_ALG is not available")

// Backend is a sector transform run outside the in-process drivers: an
// offload engine. It has Cipher's request semantics.
type Backend interface {
	// Name describes the backend and the driver doing the work.
	Name() string
	EncryptSectors(dst, src []byte, firstSector uint64) error
	DecryptSectors(dst, src []byte, firstSector uint64) error
	Close() error
}

// AFALGAvailable reports whether AF_ALG skcipher sockets can be made.
func AFALGAvailable() error {
	fd, err := unix.Socket(unix.AF_ALG, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: socket(AF_ALG): %v", ErrNoAFALG, err)
	}
	unix.Close(fd)
	return nil
}

// AFALGOptions tune an AFALGCipher.
type AFALGOptions struct {
	// Sockets is the number of operation sockets, the number of requests
	// in flight at once; 0 means GOMAXPROCS.
	Sockets int
	// Threshold fixes the break-even batch size in bytes: batches of at
	// least Threshold bytes go to the kernel. 0 measures it on first use;
	// a negative value never offloads.
	Threshold int64
}

// AFALGCipher is a sector cipher whose transform runs in the kernel. It is
// safe for concurrent use.
type AFALGCipher struct {
	c       *Cipher // in-process twin: IVs, geometry, validation, fallback
	kname   string  // kernel algorithm name
	kdriver string  // driver the kernel picked (from /proc/crypto)
	tfm     int
	pool    chan *afalgOp
	sockets int

	threshold atomic.Int64 // 0: not measured yet
	measuring sync.Mutex

	offloaded, inProcess atomic.Int64 // bytes, for tests and benchmarks

	closeMu sync.RWMutex
	closed  bool
}

var _ Backend = (*AFALGCipher)(nil)

// afalgOp is one operation socket with its control-message buffer.
type afalgOp struct {
	fd    int
	oob   []byte // ALG_SET_OP [+ ALG_SET_IV]
	opAt  int    // offset of the operation word in oob
	ivAt  int    // offset of the IV bytes in oob
	ivs   []byte // IV scratch for maxBatch sectors
	dirty bool   // a failed request may have left data queued
}

// NewAFALGCipher makes an offloading sector cipher. It fails with an error
// wrapping ErrNoAFALG when the kernel has no AF_ALG, and ErrUnsupported
// when the kernel lacks the transform, refuses the key, disagrees with the
// in-process drivers on a probe request, or the IV mode needs the data
// (lmk, tcw, elephant) or several subkeys.
func NewAFALGCipher(spec string, key []byte, opts Options, ao AFALGOptions) (*AFALGCipher, error) {
	c, err := New(spec, key, opts)
	if err != nil {
		return nil, err
	}
	a, err := newAFALG(c, key, ao)
	if err != nil {
		c.Wipe()
		return nil, err
	}
	return a, nil
}

func newAFALG(c *Cipher, key []byte, ao AFALGOptions) (*AFALGCipher, error) {
	if c.data != nil {
		return nil, fmt.Errorf("%w: %s: IV mode %s works on the data, one sector at a time; AF_ALG takes plain IVs only", ErrUnsupported, c.spec, c.spec.IVMode)
	}
	if len(c.tfms) != 1 {
		return nil, fmt.Errorf("%w: %s: %d subkeys; AF_ALG offload takes one key", ErrUnsupported, c.spec, len(c.tfms))
	}
	if c.ivSize > 64 {
		return nil, fmt.Errorf("%w: %s: %d-byte IV", ErrUnsupported, c.spec, c.ivSize)
	}
	if err := AFALGAvailable(); err != nil {
		return nil, err
	}
	a := &AFALGCipher{c: c, kname: c.spec.CAPI, tfm: -1}
	var err error
	if a.tfm, err = unix.Socket(unix.AF_ALG, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0); err != nil {
		return nil, fmt.Errorf("%w: socket(AF_ALG): %v", ErrNoAFALG, err)
	}
	if err := unix.Bind(a.tfm, &unix.SockaddrALG{Type: "skcipher", Name: a.kname}); err != nil {
		a.Close()
		return nil, fmt.Errorf("%w: the kernel has no skcipher %s: %v", ErrUnsupported, a.kname, err)
	}
	if err := unix.SetsockoptString(a.tfm, unix.SOL_ALG, unix.ALG_SET_KEY, string(key)); err != nil {
		a.Close()
		return nil, fmt.Errorf("%w: the kernel's %s refuses a %d-byte key: %v", ErrUnsupported, a.kname, len(key), err)
	}
	a.kdriver = kernelDriver(a.kname)
	a.sockets = ao.Sockets
	if a.sockets <= 0 {
		a.sockets = runtime.GOMAXPROCS(0)
	}
	a.pool = make(chan *afalgOp, a.sockets)
	for i := 0; i < a.sockets; i++ {
		op, err := a.newOp()
		if err != nil {
			a.Close()
			return nil, err
		}
		a.pool <- op
	}
	if ao.Threshold != 0 {
		a.threshold.Store(max(ao.Threshold, -1))
	}
	if err := a.probe(); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

func (a *AFALGCipher) newOp() (*afalgOp, error) {
	// accept(2) with no address: unix.Accept cannot convert AF_ALG's empty
	// peer address and would leak the descriptor.
	fd, _, errno := unix.Syscall6(unix.SYS_ACCEPT4, uintptr(a.tfm), 0, 0, unix.SOCK_CLOEXEC, 0, 0)
	if errno != 0 {
		return nil, fmt.Errorf("%w: accept on the %s socket: %v", ErrNoAFALG, a.kname, errno)
	}
	ivSize := a.c.ivSize
	n := unix.CmsgSpace(4)
	if ivSize > 0 {
		n += unix.CmsgSpace(4 + ivSize)
	}
	op := &afalgOp{fd: int(fd), oob: make([]byte, n), ivs: make([]byte, maxBatch*max(ivSize, 1))}
	h := (*unix.Cmsghdr)(unsafe.Pointer(&op.oob[0]))
	h.Level, h.Type = unix.SOL_ALG, unix.ALG_SET_OP
	h.SetLen(unix.CmsgLen(4))
	op.opAt = unix.CmsgLen(0)
	if ivSize > 0 {
		at := unix.CmsgSpace(4)
		h := (*unix.Cmsghdr)(unsafe.Pointer(&op.oob[at]))
		h.Level, h.Type = unix.SOL_ALG, unix.ALG_SET_IV
		h.SetLen(unix.CmsgLen(4 + ivSize))
		binary.NativeEndian.PutUint32(op.oob[at+unix.CmsgLen(0):], uint32(ivSize))
		op.ivAt = at + unix.CmsgLen(0) + 4
	}
	return op, nil
}

// probe checks the kernel's answers against the in-process drivers on a
// few sectors, both ways, before the engine is used.
func (a *AFALGCipher) probe() error {
	ss := a.c.opts.SectorSize
	src := make([]byte, 3*ss)
	for i := range src {
		src[i] = byte(i*7 + i>>9)
	}
	first := uint64(3 * ss / 512)
	want := make([]byte, len(src))
	if err := a.c.crypt(want, src, first, true); err != nil {
		return err
	}
	got := make([]byte, len(src))
	if err := a.offload(got, src, first, true); err != nil {
		return fmt.Errorf("%w: the kernel's %s: %v", ErrUnsupported, a.kname, err)
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("%w: the kernel's %s (%s) and blkcrypt's %s disagree on %s", ErrUnsupported, a.kname, a.kdriver, a.c.Driver(), a.c.spec)
	}
	if err := a.offload(got, want, first, false); err != nil || !bytes.Equal(got, src) {
		return fmt.Errorf("%w: the kernel's %s (%s) does not decrypt what blkcrypt encrypts (%v)", ErrUnsupported, a.kname, a.kdriver, err)
	}
	return nil
}

// Name says which kernel driver does the work.
func (a *AFALGCipher) Name() string {
	d := a.kdriver
	if d == "" {
		d = a.kname
	}
	return "afalg:" + d
}

// KernelDriver is the driver the kernel picked for the transform, as
// /proc/crypto names it ("" if it cannot be read).
func (a *AFALGCipher) KernelDriver() string { return a.kdriver }

// Cipher returns the in-process twin, used below the break-even size.
func (a *AFALGCipher) Cipher() *Cipher { return a.c }

// Sockets is the size of the operation-socket pool.
func (a *AFALGCipher) Sockets() int { return a.sockets }

// Stats returns how many bytes went to the kernel and how many were done
// in-process.
func (a *AFALGCipher) Stats() (offloaded, inProcess int64) {
	return a.offloaded.Load(), a.inProcess.Load()
}

// EncryptSectors has Cipher.EncryptSectors's semantics.
func (a *AFALGCipher) EncryptSectors(dst, src []byte, firstSector uint64) error {
	return a.run(dst, src, firstSector, true)
}

// DecryptSectors has Cipher.DecryptSectors's semantics.
func (a *AFALGCipher) DecryptSectors(dst, src []byte, firstSector uint64) error {
	return a.run(dst, src, firstSector, false)
}

// OffloadSectors always uses the kernel, whatever the batch size (for
// conformance tests and benchmarks).
func (a *AFALGCipher) OffloadSectors(dst, src []byte, firstSector uint64, encrypt bool) error {
	if err := a.c.check(dst, src, firstSector); err != nil {
		return err
	}
	return a.offload(dst[:len(src)], src, firstSector, encrypt)
}

func (a *AFALGCipher) run(dst, src []byte, first uint64, enc bool) error {
	if err := a.c.check(dst, src, first); err != nil {
		return err
	}
	if t := a.Threshold(); t < 0 || int64(len(src)) < t {
		a.inProcess.Add(int64(len(src)))
		if enc {
			return a.c.EncryptSectors(dst, src, first)
		}
		return a.c.DecryptSectors(dst, src, first)
	}
	return a.offload(dst[:len(src)], src, first, enc)
}

var errClosed = errors.New("AF_ALG cipher is closed")

// offload splits the batch into one contiguous part per operation socket
// and runs the parts concurrently, the caller's goroutine taking the first.
func (a *AFALGCipher) offload(dst, src []byte, first uint64, enc bool) error {
	a.closeMu.RLock()
	defer a.closeMu.RUnlock()
	if a.closed {
		return errClosed
	}
	ss := a.c.opts.SectorSize
	n := len(src) / ss
	parts := min(a.sockets, n)
	if parts <= 1 {
		op := <-a.pool
		err := a.doOp(op, dst, src, first, enc)
		a.pool <- op
		a.offloaded.Add(int64(len(src)))
		return err
	}
	per, rest := n/parts, n%parts
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	start := 0
	for p := 0; p < parts; p++ {
		cnt := per + boolInt(p < rest)
		d, s := dst[start*ss:(start+cnt)*ss], src[start*ss:(start+cnt)*ss]
		f := first + uint64(start*ss/512)
		work := func() {
			op := <-a.pool
			if err := a.doOp(op, d, s, f, enc); err != nil {
				firstErr.CompareAndSwap(nil, &err)
			}
			a.pool <- op
		}
		if p == parts-1 {
			work()
		} else {
			wg.Add(1)
			go func() { defer wg.Done(); work() }()
		}
		start += cnt
	}
	wg.Wait()
	a.offloaded.Add(int64(len(src)))
	if e := firstErr.Load(); e != nil {
		return *e
	}
	return nil
}

// doOp runs sectors on one operation socket: IVs are generated in-process
// (the kernel's templates take the IV as given), then one sendmsg and one
// read per sector.
func (a *AFALGCipher) doOp(op *afalgOp, dst, src []byte, first uint64, enc bool) error {
	if op.dirty {
		// A failed request may have left queued data on the socket:
		// replace it rather than mix requests.
		nop, err := a.newOp()
		if err != nil {
			return err
		}
		unix.Close(op.fd)
		*op = *nop
	}
	c := a.c
	ss := c.opts.SectorSize
	n := len(src) / ss
	s := c.opts.IVOffset + first
	step := uint64(1) << c.shift
	ivN, ivStep := s, step
	if c.opts.LargeIV {
		ivN, ivStep = s>>c.shift, 1
	}
	o := uint32(unix.ALG_OP_DECRYPT)
	if enc {
		o = unix.ALG_OP_ENCRYPT
	}
	binary.NativeEndian.PutUint32(op.oob[op.opAt:], o)
	ivSize := c.ivSize
	if ivSize == 0 {
		// No IV (ecb): sectors are independent of their position, so many
		// go in one request.
		for at := 0; at < len(src); {
			l := min(afalgMaxRequest/ss*ss, len(src)-at)
			if err := op.cycle(dst[at:at+l], src[at:at+l]); err != nil {
				op.dirty = true
				return fmt.Errorf("AF_ALG %s: %w", a.kname, err)
			}
			at += l
		}
		return nil
	}
	for i := 0; i < n; i += maxBatch {
		k := min(maxBatch, n-i)
		if ivSize > 0 {
			c.iv.generate(op.ivs[:k*ivSize], ivSize, ivN+uint64(i)*ivStep, ivStep, k)
		}
		for j := 0; j < k; j++ {
			if ivSize > 0 {
				copy(op.oob[op.ivAt:op.ivAt+ivSize], op.ivs[j*ivSize:(j+1)*ivSize])
			}
			at := (i + j) * ss
			if err := op.cycle(dst[at:at+ss], src[at:at+ss]); err != nil {
				op.dirty = true
				return fmt.Errorf("AF_ALG %s: %w", a.kname, err)
			}
		}
	}
	return nil
}

// afalgMaxRequest bounds one request without an IV: well below the
// socket's send buffer, so that sendmsg never waits for a read.
const afalgMaxRequest = 64 << 10

// cycle sends one request and reads its result.
func (op *afalgOp) cycle(dst, src []byte) error {
	for {
		_, err := unix.SendmsgN(op.fd, src, op.oob, nil, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("sendmsg: %w", err)
		}
		break
	}
	for got := 0; got < len(dst); {
		m, err := unix.Read(op.fd, dst[got:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		if m == 0 {
			return fmt.Errorf("read: %d of %d bytes", got, len(dst))
		}
		got += m
	}
	return nil
}

// Threshold returns the break-even batch size in bytes, measuring it on
// first use; -1 means the kernel never wins and everything runs
// in-process.
func (a *AFALGCipher) Threshold() int64 {
	if t := a.threshold.Load(); t != 0 {
		return t
	}
	a.measuring.Lock()
	defer a.measuring.Unlock()
	if t := a.threshold.Load(); t != 0 {
		return t
	}
	t, _ := a.Measure()
	a.threshold.Store(t)
	return t
}

// SetThreshold fixes the break-even size (see AFALGOptions.Threshold); 0
// measures again on next use.
func (a *AFALGCipher) SetThreshold(n int64) { a.threshold.Store(max(n, -1)) }

// AFALGPoint is one batch size of a break-even measurement.
type AFALGPoint struct {
	Bytes     int
	InProcess time.Duration // best of several runs (the in-process engine, parallel where it pays)
	Kernel    time.Duration // best of several runs through AF_ALG
}

// Measure times the in-process path and the kernel on batches from one
// sector to 1 MiB and returns the smallest size at which the kernel is
// clearly faster (by 20%, so that noise does not pull the threshold down
// into sizes where it loses on average), or -1 if it never is, with the
// timings it took. It takes tens of milliseconds natively.
func (a *AFALGCipher) Measure() (int64, []AFALGPoint) {
	const maxSize = 1 << 20
	ss := a.c.opts.SectorSize
	buf := make([]byte, maxSize)
	best := func(f func() error) time.Duration {
		m := time.Duration(1 << 62)
		for r := 0; r < 3; r++ {
			t0 := time.Now()
			if f() != nil {
				return m
			}
			m = min(m, time.Since(t0))
		}
		return m
	}
	var pts []AFALGPoint
	for size := ss; size <= maxSize; size *= 2 {
		b := buf[:size]
		p := AFALGPoint{Bytes: size,
			InProcess: best(func() error { return a.c.EncryptSectors(b, b, 0) }),
			Kernel:    best(func() error { return a.offload(b, b, 0, true) }),
		}
		pts = append(pts, p)
		if p.Kernel*10 < p.InProcess*8 {
			return int64(size), pts
		}
	}
	return -1, pts
}

// Close releases the sockets and wipes the in-process key. The cipher must
// not be used afterwards.
func (a *AFALGCipher) Close() error {
	a.closeMu.Lock()
	defer a.closeMu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	if a.pool != nil {
		for len(a.pool) > 0 {
			op := <-a.pool
			unix.Close(op.fd)
		}
	}
	if a.tfm >= 0 {
		unix.Close(a.tfm)
	}
	a.c.Wipe()
	return nil
}

// kernelDriver returns the highest-priority self-tested skcipher driver of
// name in /proc/crypto.
func kernelDriver(name string) string {
	data, err := os.ReadFile("/proc/crypto")
	if err != nil {
		return ""
	}
	best, bestPrio := "", -1
	for _, blk := range strings.Split(string(data), "\n\n") {
		f := map[string]string{}
		for _, l := range strings.Split(blk, "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok {
				f[strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
		}
		prio, _ := strconv.Atoi(f["priority"])
		if f["name"] == name && f["type"] == "skcipher" && f["selftest"] != "unknown" && prio > bestPrio {
			best, bestPrio = f["driver"], prio
		}
	}
	return best
}
