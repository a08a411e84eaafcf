package capi

import (
	"crypto/cipher"
	"errors"
	"fmt"
	"hash"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Sentinel errors. Every error returned by this package wraps one of them.
var (
	// ErrNotFound means no driver, template or hash of that name is registered.
	ErrNotFound = errors.New("algorithm not found")
	// ErrInvalidName means the name does not parse as a crypto API name, or a
	// template was given the wrong kind or number of arguments.
	ErrInvalidName = errors.New("invalid algorithm name")
	// ErrInvalidKeySize means the key length is not one the algorithm takes.
	ErrInvalidKeySize = errors.New("invalid key size")
	// ErrInvalidLength means a request's data, IV or sector size is not one
	// the transform can process.
	ErrInvalidLength = errors.New("invalid length")
	// ErrSelfTest means every driver of the name failed its self-test.
	ErrSelfTest = errors.New("self-test failed")
)

// Type is the kind of transform an Alg provides.
type Type int

const (
	// TypeCipher is a single-block cipher such as "aes".
	TypeCipher Type = iota + 1
	// TypeSkcipher is a length-preserving cipher over many blocks, such as
	// "cbc(aes)" or "xts(aes)".
	TypeSkcipher
	// TypeHash is a message digest such as "sha256".
	TypeHash
)

func (t Type) String() string {
	switch t {
	case TypeCipher:
		return "cipher"
	case TypeSkcipher:
		return "skcipher"
	case TypeHash:
		return "shash"
	}
	return "unknown"
}

// Skcipher is what a driver implements. Inputs are validated by Tfm before
// they reach it: iv has the right size and len(src) is acceptable. dst and
// src are either the same slice or do not overlap. The IV is never modified.
type Skcipher interface {
	Encrypt(dst, src, iv []byte)
	Decrypt(dst, src, iv []byte)
}

// SectorSkcipher is implemented by drivers that process many equal-size
// requests, each with its own IV, in one call (dm-crypt sectors). ivs holds
// one IV per request and may be overwritten as scratch space.
type SectorSkcipher interface {
	EncryptSectors(dst, src []byte, sectorSize int, ivs []byte)
	DecryptSectors(dst, src []byte, sectorSize int, ivs []byte)
}

// Plain64Skcipher is implemented by drivers that can take the IV as a
// 64-bit number, little-endian and zero-padded to IVSize (dm-crypt's plain64
// IV, which is also the input essiv encrypts). Passed by value, the IV needs
// no buffer: this is the single-sector path a small random I/O takes.
type Plain64Skcipher interface {
	EncryptPlain64(dst, src []byte, n uint64)
	DecryptPlain64(dst, src []byte, n uint64)
}

// Wiper is implemented by transforms that can zero their key material.
type Wiper interface{ Wipe() }

// Alg is one driver of an algorithm: an implementation with a driver name
// and a priority. It is immutable once registered, except for its self-test
// state.
type Alg struct {
	Name     string // algorithm name, e.g. "cbc(aes)"
	Driver   string // driver name, e.g. "cbc(aes-aesni)" or "cbc-aes-aesni"
	Priority int
	Type     Type

	BlockSize  int   // cipher block size; skcipher length granularity; hash block size
	IVSize     int   // skcipher only
	DigestSize int   // hash only
	KeySizes   []int // valid key sizes in bytes, ascending (cipher, skcipher)
	// MinLen, when non-zero, lets a skcipher take any length >= MinLen
	// instead of multiples of BlockSize (XTS with ciphertext stealing).
	MinLen int
	// Fused marks a driver that implements a whole template instance in one
	// routine rather than composing inner drivers.
	Fused bool

	NewCipher   func(key []byte) (cipher.Block, error) // TypeCipher
	NewSkcipher func(key []byte) (Skcipher, error)     // TypeSkcipher
	NewHash     func() hash.Hash                       // TypeHash

	// Base is the innermost block cipher of a skcipher, used by essiv to
	// pick the IV cipher. Nil where there is none (adiantum).
	Base *Alg
	// Inner lists the drivers a template instance was built from.
	Inner []*Alg

	testMu   sync.Mutex
	tested   bool
	testErr  error
	testNote string
}

// SelfTest runs the driver's known-answer tests once and returns the cached
// result. A driver whose self-test fails is never chosen by Lookup.
func (a *Alg) SelfTest() error {
	a.testMu.Lock()
	defer a.testMu.Unlock()
	if !a.tested {
		a.testNote, a.testErr = selfTest(a)
		if a.testErr != nil {
			a.testErr = fmt.Errorf("%w: %s (%s): %w", ErrSelfTest, a.Name, a.Driver, a.testErr)
		}
		a.tested = true
	}
	return a.testErr
}

// SelfTestState describes the self-test result without running it:
// "untested", "passed", "passed (no vectors)" or "failed: …".
func (a *Alg) SelfTestState() string {
	a.testMu.Lock()
	defer a.testMu.Unlock()
	switch {
	case !a.tested:
		return "untested"
	case a.testErr != nil:
		return "failed: " + a.testErr.Error()
	}
	return a.testNote
}

// ValidKeySize reports whether n bytes is a key size the driver takes.
func (a *Alg) ValidKeySize(n int) bool { return slices.Contains(a.KeySizes, n) }

func (a *Alg) checkKey(key []byte) error {
	if !a.ValidKeySize(len(key)) {
		bits := make([]string, len(a.KeySizes))
		for i, k := range a.KeySizes {
			bits[i] = fmt.Sprint(k * 8)
		}
		return fmt.Errorf("%w: %s takes a %s-bit key, not %d bits", ErrInvalidKeySize, a.Name, strings.Join(bits, "/"), len(key)*8)
	}
	return nil
}

// Template builds skcipher instances from the drivers of its arguments, like
// a kernel crypto template ("cbc", "xts", "essiv").
type Template struct {
	Name string
	// Instantiate returns one instance per usable combination of argument
	// drivers. args[i] lists the drivers of argument i that passed their
	// self-tests, best first.
	Instantiate func(n *Name, args [][]*Alg) ([]*Alg, error)
}

var registry = struct {
	sync.Mutex
	direct    map[string][]*Alg // by algorithm name
	byDriver  map[string]*Alg
	templates map[string]*Template
	resolved  map[string][]*Alg // cache: canonical name -> drivers, best first
}{
	direct:    map[string][]*Alg{},
	byDriver:  map[string]*Alg{},
	templates: map[string]*Template{},
	resolved:  map[string][]*Alg{},
}

// Register adds a driver. It fails if the driver name is taken or the
// description is incomplete.
func Register(a *Alg) error {
	if _, err := ParseName(a.Name); err != nil {
		return err
	}
	switch {
	case a.Driver == "":
		return fmt.Errorf("%w: driver of %s has no name", ErrInvalidName, a.Name)
	case a.Type == TypeCipher && a.NewCipher == nil,
		a.Type == TypeSkcipher && a.NewSkcipher == nil,
		a.Type == TypeHash && a.NewHash == nil:
		return fmt.Errorf("%w: driver %s has no constructor for its type", ErrInvalidName, a.Driver)
	}
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.byDriver[a.Driver]; dup {
		return fmt.Errorf("capi: driver %q already registered", a.Driver)
	}
	registry.direct[a.Name] = append(registry.direct[a.Name], a)
	registry.byDriver[a.Driver] = a
	clear(registry.resolved)
	return nil
}

// Unregister removes a driver by driver name (used by tests that inject
// drivers).
func Unregister(driver string) {
	registry.Lock()
	defer registry.Unlock()
	a, ok := registry.byDriver[driver]
	if !ok {
		return
	}
	delete(registry.byDriver, driver)
	registry.direct[a.Name] = slices.DeleteFunc(registry.direct[a.Name], func(b *Alg) bool { return b == a })
	clear(registry.resolved)
}

// RegisterTemplate adds a template.
func RegisterTemplate(t *Template) {
	registry.Lock()
	defer registry.Unlock()
	registry.templates[t.Name] = t
	clear(registry.resolved)
}

func mustRegister(a *Alg) {
	if err := Register(a); err != nil {
		panic(err)
	}
}

// Drivers returns every driver of the named algorithm, best (highest
// priority) first, instantiating templates as needed. A name may also be a
// driver name, which yields that one driver.
func Drivers(name string) ([]*Alg, error) {
	n, err := ParseName(name)
	if err != nil {
		return nil, err
	}
	return resolve(n)
}

func resolve(n *Name) ([]*Alg, error) {
	canon := n.String()
	registry.Lock()
	if r, ok := registry.resolved[canon]; ok {
		registry.Unlock()
		return r, nil
	}
	list := slices.Clone(registry.direct[canon])
	tmpl := registry.templates[n.Ident]
	if len(list) == 0 && len(n.Args) == 0 {
		if a, ok := registry.byDriver[canon]; ok {
			list = []*Alg{a}
		}
	}
	registry.Unlock()

	if len(n.Args) > 0 {
		if tmpl == nil && len(list) == 0 {
			return nil, fmt.Errorf("%w: no template %q (in %q)", ErrNotFound, n.Ident, canon)
		}
		if tmpl != nil {
			args := make([][]*Alg, len(n.Args))
			for i, an := range n.Args {
				ds, err := resolve(an)
				if err != nil {
					return nil, err
				}
				for _, d := range ds {
					if d.SelfTest() == nil {
						args[i] = append(args[i], d)
					}
				}
				if len(args[i]) == 0 {
					return nil, fmt.Errorf("%w: every driver of %s failed (%v)", ErrSelfTest, an, ds[0].SelfTest())
				}
			}
			inst, err := tmpl.Instantiate(n, args)
			if err != nil {
				return nil, err
			}
			list = append(list, inst...)
		}
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, canon)
	}
	sort.SliceStable(list, func(i, j int) bool { return list[i].Priority > list[j].Priority })

	registry.Lock()
	defer registry.Unlock()
	if r, ok := registry.resolved[canon]; ok {
		return r, nil // another goroutine won; keep one set of instances
	}
	for _, a := range list {
		if _, ok := registry.byDriver[a.Driver]; !ok {
			registry.byDriver[a.Driver] = a
		}
	}
	registry.resolved[canon] = list
	return list, nil
}

// Lookup returns the highest-priority driver of name that passes its
// self-test.
func Lookup(name string) (*Alg, error) {
	ds, err := Drivers(name)
	if err != nil {
		return nil, err
	}
	var firstErr error
	for _, d := range ds {
		if err := d.SelfTest(); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		return d, nil
	}
	return nil, firstErr
}

// LookupDriver returns the driver of name called driver, after its
// self-test.
func LookupDriver(name, driver string) (*Alg, error) {
	ds, err := Drivers(name)
	if err != nil {
		return nil, err
	}
	for _, d := range ds {
		if d.Driver == driver {
			if err := d.SelfTest(); err != nil {
				return nil, err
			}
			return d, nil
		}
	}
	return nil, fmt.Errorf("%w: %s has no driver %q", ErrNotFound, name, driver)
}

// List returns every driver registered or instantiated so far, sorted by
// name and then priority, as /proc/crypto lists them.
func List() []*Alg {
	registry.Lock()
	defer registry.Unlock()
	out := make([]*Alg, 0, len(registry.byDriver))
	for _, a := range registry.byDriver {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		if out[i].Priority != out[j].Priority {
			return out[i].Priority > out[j].Priority
		}
		return out[i].Driver < out[j].Driver
	})
	return out
}

// NewHash returns a new hash.Hash of the best driver of name.
func NewHash(name string) (hash.Hash, error) {
	f, err := HashFunc(name)
	if err != nil {
		return nil, err
	}
	return f(), nil
}

// HashFunc returns the constructor of the best driver of a hash name, for
// PBKDF2, HMAC and the AF splitter.
func HashFunc(name string) (func() hash.Hash, error) {
	a, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	if a.Type != TypeHash {
		return nil, fmt.Errorf("%w: %s is a %s, not a hash", ErrInvalidName, name, a.Type)
	}
	return a.NewHash, nil
}

// NewCipher returns the best single-block cipher of name keyed with key.
func NewCipher(name string, key []byte) (cipher.Block, error) {
	a, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	return a.Cipher(key)
}

// Cipher instantiates a TypeCipher driver.
func (a *Alg) Cipher(key []byte) (cipher.Block, error) {
	if a.Type != TypeCipher {
		return nil, fmt.Errorf("%w: %s is a %s, not a cipher", ErrInvalidName, a.Name, a.Type)
	}
	if err := a.checkKey(key); err != nil {
		return nil, err
	}
	return a.NewCipher(key)
}
