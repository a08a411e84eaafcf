package tcrypt

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"hash"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
)

// Options select how a header is searched for.
type Options struct {
	// Passphrase is the password; at most 64 bytes (128 for VeraCrypt).
	Passphrase []byte
	// Keyfiles are the contents of the key files (see ReadKeyfile); their
	// order does not matter.
	Keyfiles [][]byte
	// PIM is VeraCrypt's personal iterations multiplier; 0 for none. With
	// a PIM only VeraCrypt derivations are tried.
	PIM uint32
	// Hash and Cipher narrow the search as cryptsetup's --hash and
	// --cipher do: a substring of the hash (or "argon2id") and of the
	// cipher chain name.
	Hash, Cipher string
	// Hidden, System and Backup choose the header (--tcrypt-hidden,
	// --tcrypt-system, --tcrypt-backup).
	Hidden, System, Backup bool
	// NoVeraCrypt is --disable-veracrypt: TrueCrypt derivations and magic
	// only. VeraCrypt is tried by default, as in cryptsetup 2.4 and later.
	NoVeraCrypt bool
	// NoLegacy leaves out TrueCrypt 1.x-4.0 (PBKDF2-SHA1 and the CBC
	// chains), which cryptsetup's command line always tries.
	NoLegacy bool
	// Workers bounds the parallel trial; 0 means GOMAXPROCS, 1 tries one
	// derivation after another as cryptsetup does.
	Workers int
	// Context, when not nil, cancels a search in progress.
	Context context.Context
}

// Header is a decrypted TrueCrypt or VeraCrypt header and how it was
// found.
type Header struct {
	Fields
	// KDF is the derivation that decrypted it; PIM the PIM it was used with.
	KDF KDF
	PIM uint32
	// Iterations and MemoryKiB are the costs actually used (after the PIM).
	Iterations, MemoryKiB uint32
	// Chain is the cipher chain and mode.
	Chain *Chain
	// Offset is where the header sector was read, in bytes from the start
	// of the device (for the old hidden header, from the start too).
	Offset int64
	// Hidden, System and Backup say which header this is.
	Hidden, System, Backup bool
}

// Wipe zeroes the keys held by the header.
func (h *Header) Wipe() { h.Fields.Wipe() }

// kdfPlan is one derivation to try, with the costs for the PIM.
type kdfPlan struct {
	idx       int
	kdf       KDF
	iter, mem uint32
}

// plan lists the derivations Options allow, in search order, and those
// skipped because blkcrypt lacks the hash.
func (o *Options) plan() (plans []kdfPlan, skipped []string, err error) {
	known := false
	for i, k := range KDFs {
		if !k.matches(o.Hash) {
			continue
		}
		known = true
		if k.Legacy && o.NoLegacy {
			continue
		}
		if k.VeraCrypt && o.NoVeraCrypt {
			continue
		}
		if o.PIM != 0 && !o.NoVeraCrypt && !k.VeraCrypt {
			continue
		}
		if !k.Available() {
			skipped = append(skipped, "PBKDF2-"+k.Hash)
			continue
		}
		it, mem := k.costs(o.PIM)
		plans = append(plans, kdfPlan{i, k, it, mem})
	}
	if !known {
		return nil, nil, fmt.Errorf("%w: no TCRYPT key derivation uses hash %q", ErrInvalid, o.Hash)
	}
	return plans, skipped, nil
}

func (o *Options) chains() ([]*Chain, error) {
	var cs []*Chain
	known := false
	for i := range Chains {
		c := &Chains[i]
		if o.Cipher != "" && !strings.Contains(c.Name, o.Cipher) {
			continue
		}
		known = true
		if c.Legacy && o.NoLegacy {
			continue
		}
		cs = append(cs, c)
	}
	if !known {
		return nil, fmt.Errorf("%w: no TCRYPT cipher chain matches %q", ErrInvalid, o.Cipher)
	}
	return cs, nil
}

// Search finds the derivation and cipher chain that decrypt the 512-byte
// header sector, trying derivations in parallel (Options.Workers). The
// first valid header found wins. A miss wraps ErrNoHeader and
// luksutil.ErrWrongPassphrase.
func Search(sector []byte, o *Options) (*Header, error) {
	if len(sector) < SectorLen {
		return nil, fmt.Errorf("%w: header sector of %d bytes", ErrInvalid, len(sector))
	}
	plans, skipped, err := o.plan()
	if err != nil {
		return nil, err
	}
	chains, err := o.chains()
	if err != nil {
		return nil, err
	}
	pwd, err := Secret(o.Passphrase, o.Keyfiles, !o.NoVeraCrypt)
	if err != nil {
		return nil, err
	}
	defer clear(pwd)
	s := &search{
		salt:   append([]byte(nil), sector[:SaltLen]...),
		enc:    append([]byte(nil), sector[SaltLen:SectorLen]...),
		pwd:    pwd,
		chains: chains,
		vera:   !o.NoVeraCrypt,
		done:   make(chan struct{}),
	}
	ctx := o.Context
	if ctx == nil {
		ctx = context.Background()
	}
	workers := o.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	if err := s.schedule(plans); err != nil {
		return nil, err
	}
	stopCtx := context.AfterFunc(ctx, func() { s.finish(nil) })
	defer stopCtx()
	s.mu.Lock()
	s.workers = workers
	s.mu.Unlock()
	for i := 0; i < workers; i++ {
		go s.worker()
	}
	<-s.done
	if err := ctx.Err(); err != nil && s.result == nil {
		return nil, err
	}
	s.mu.Lock()
	h, corrupt := s.result, s.corrupt
	for c := range s.unavailable {
		skipped = append(skipped, c)
	}
	s.mu.Unlock()
	sort.Strings(skipped)
	if h != nil {
		h.PIM = o.PIM
		return h, nil
	}
	if corrupt != nil {
		return nil, corrupt
	}
	msg := ErrNoHeader.Error()
	if len(skipped) > 0 {
		msg += " (" + strings.Join(skipped, ", ") + " not available, skipped)"
	}
	return nil, &noHeaderError{msg}
}

type noHeaderError struct{ msg string }

func (e *noHeaderError) Error() string { return e.msg }
func (e *noHeaderError) Is(target error) bool {
	return target == ErrNoHeader || target == luksutil.ErrWrongPassphrase
}

// search is the state of one parallel header search. Work is split into
// segments: a PBKDF2 output block run up to the next iteration count some
// derivation needs (the 1000-iteration result is on the way to the
// 2000-iteration one, and TrueCrypt's on the way to VeraCrypt's), or one
// whole Argon2id derivation. Segments are taken in the order of the
// derivation they finish, so cheap TrueCrypt derivations are tried first.
type search struct {
	salt, enc, pwd []byte
	chains         []*Chain
	vera           bool

	stop atomic.Bool

	mu       sync.Mutex
	cond     *sync.Cond
	queue    segQueue
	deferred []*segment // expensive Argon2id: only when nothing else is left
	running  int
	workers  int
	result   *Header
	corrupt  error
	// unavailable are the chains whose ciphers the crypto API lacks.
	unavailable map[string]bool
	finished    bool
	done        chan struct{}
}

type target struct {
	plan    kdfPlan
	key     []byte // DerivedLen bytes, filled block by block
	pending int    // blocks still to come
}

type pbkdfRun struct {
	newHash func() hash.Hash
	hl      int
	stops   []uint32    // ascending iteration counts
	targets [][]*target // per stop
}

type segment struct {
	prio  int // search-order index of the derivation it completes
	order int // tie-break: insertion order
	run   *pbkdfRun
	block int // 0-based output block
	stop  int // index into run.stops
	state *pbkdf2Block
	argon *target
}

type segQueue []*segment

func (q segQueue) Len() int { return len(q) }
func (q segQueue) Less(i, j int) bool {
	if q[i].prio != q[j].prio {
		return q[i].prio < q[j].prio
	}
	return q[i].order < q[j].order
}
func (q segQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *segQueue) Push(x any)   { *q = append(*q, x.(*segment)) }
func (q *segQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// defaultArgon2Cost is the cost of VeraCrypt's default Argon2id; dearer
// ones (large PIMs) run only once every PBKDF2 derivation has failed,
// since an Argon2id computation cannot be interrupted.
const defaultArgon2Cost = 6 * 425984

var segOrder atomic.Int64

func (s *search) schedule(plans []kdfPlan) error {
	s.cond = sync.NewCond(&s.mu)
	runs := map[string]*pbkdfRun{}
	var order []string
	for _, p := range plans {
		t := &target{plan: p, key: make([]byte, DerivedLen)}
		if p.kdf.Name == "argon2id" {
			seg := &segment{prio: p.idx, order: int(segOrder.Add(1)), argon: t}
			if uint64(p.iter)*uint64(p.mem) > defaultArgon2Cost {
				s.deferred = append(s.deferred, seg)
			} else {
				heap.Push(&s.queue, seg)
			}
			continue
		}
		r := runs[p.kdf.Hash]
		if r == nil {
			f, err := p.kdf.hashFunc()
			if err != nil {
				return err
			}
			r = &pbkdfRun{newHash: f, hl: f().Size()}
			runs[p.kdf.Hash] = r
			order = append(order, p.kdf.Hash)
		}
		t.pending = (DerivedLen + r.hl - 1) / r.hl
		i := 0
		for i < len(r.stops) && r.stops[i] < p.iter {
			i++
		}
		if i < len(r.stops) && r.stops[i] == p.iter {
			r.targets[i] = append(r.targets[i], t)
		} else {
			r.stops = append(r.stops[:i], append([]uint32{p.iter}, r.stops[i:]...)...)
			r.targets = append(r.targets[:i], append([][]*target{{t}}, r.targets[i:]...)...)
		}
	}
	for _, h := range order {
		r := runs[h]
		blocks := (DerivedLen + r.hl - 1) / r.hl
		for b := 0; b < blocks; b++ {
			heap.Push(&s.queue, &segment{prio: r.prio(0), order: int(segOrder.Add(1)), run: r, block: b, stop: 0})
		}
	}
	return nil
}

func (r *pbkdfRun) prio(stop int) int {
	p := int(^uint(0) >> 1)
	for _, t := range r.targets[stop] {
		p = min(p, t.plan.idx)
	}
	return p
}

func (s *search) finish(h *Header) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.finished {
		return
	}
	s.finished = true
	s.result = h
	s.stop.Store(true)
	s.cond.Broadcast()
	close(s.done)
}

func (s *search) worker() {
	for {
		s.mu.Lock()
		for !s.finished && s.queue.Len() == 0 {
			if s.running == 0 {
				if len(s.deferred) > 0 {
					heap.Push(&s.queue, s.deferred[0])
					s.deferred = s.deferred[1:]
					continue
				}
				// Nothing left anywhere: the search failed.
				s.finished = true
				s.stop.Store(true)
				s.cond.Broadcast()
				close(s.done)
				break
			}
			s.cond.Wait()
		}
		if s.finished {
			s.mu.Unlock()
			s.drain()
			return
		}
		seg := heap.Pop(&s.queue).(*segment)
		s.running++
		s.mu.Unlock()

		next := s.runSegment(seg)

		s.mu.Lock()
		s.running--
		if next != nil && !s.finished {
			heap.Push(&s.queue, next)
		} else if next != nil {
			next.state.wipe()
		}
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

// drain wipes the state of segments nobody will run.
func (s *search) drain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.queue.Len() > 0 {
		seg := heap.Pop(&s.queue).(*segment)
		if seg.state != nil {
			seg.state.wipe()
		}
	}
}

// runSegment does one piece of work and returns the follow-up segment.
func (s *search) runSegment(seg *segment) *segment {
	if seg.argon != nil {
		t := seg.argon
		if s.stop.Load() {
			return nil
		}
		pwd := append([]byte(nil), s.pwd...)
		k := argon2id(pwd, s.salt, t.plan.iter, t.plan.mem, max(1, t.plan.kdf.Parallel), DerivedLen, s.stop.Load)
		clear(pwd)
		copy(t.key, k)
		clear(k)
		s.try(t)
		return nil
	}
	r := seg.run
	if seg.state == nil {
		seg.state = newPBKDF2Block(r.newHash, s.pwd, s.salt, uint32(seg.block+1))
	}
	if !seg.state.run(r.stops[seg.stop], s.stop.Load) {
		seg.state.wipe()
		return nil
	}
	var ready []*target
	s.mu.Lock()
	for _, t := range r.targets[seg.stop] {
		copy(t.key[seg.block*r.hl:], seg.state.t)
		t.pending--
		if t.pending == 0 {
			ready = append(ready, t)
		}
	}
	s.mu.Unlock()
	for _, t := range ready {
		s.try(t)
	}
	if seg.stop+1 == len(r.stops) || s.stop.Load() {
		seg.state.wipe()
		return nil
	}
	return &segment{prio: r.prio(seg.stop + 1), order: seg.order, run: r, block: seg.block, stop: seg.stop + 1, state: seg.state}
}

// try decrypts the header with every chain under the derived key t.
func (s *search) try(t *target) {
	defer clear(t.key)
	buf := make([]byte, HeaderLen)
	defer clear(buf)
	for _, c := range s.chains {
		if s.stop.Load() {
			return
		}
		copy(buf, s.enc)
		if err := c.decryptHeader(buf, t.key); err != nil {
			// Cipher not available: skipped, as cryptsetup does.
			s.mu.Lock()
			if s.unavailable == nil {
				s.unavailable = map[string]bool{}
			}
			s.unavailable[c.Name+"-"+c.Mode] = true
			s.mu.Unlock()
			continue
		}
		f, err := ParseFields(buf, s.vera)
		if errors.Is(err, ErrNoHeader) {
			continue
		}
		if err != nil {
			s.mu.Lock()
			if s.corrupt == nil {
				s.corrupt = err
			}
			s.mu.Unlock()
			continue
		}
		s.finish(&Header{Fields: *f, KDF: t.plan.kdf, Iterations: t.plan.iter, MemoryKiB: t.plan.mem, Chain: c})
		f.Wipe()
		return
	}
}
