//go:build linux

// Command kcheck runs inside the kernel-test guest (test/kernel). It
// compares the kernel's skcipher templates, reached through AF_ALG, with
// every one of blkcrypt's capi drivers of the same name on random keys, IVs
// and lengths (XTS lengths include ciphertext stealing), and prints one
// summary line per driver:
//
//	@@C ALG DRIVER cases=N mismatches=M kernel=KERNEL-DRIVER
//
// It is built with CGO_ENABLED=0 so that it runs in the busybox initramfs.
package main

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/blkcrypt/blkcrypt/capi"
)

// algCase says how to draw random requests for one algorithm.
type algCase struct {
	name     string
	keySizes []int
	ivSize   int
	// length draws a request length.
	length func(r *rand.Rand) int
}

func blocks(r *rand.Rand) int {
	switch r.IntN(4) {
	case 0:
		return 16 * (1 + r.IntN(4))
	case 1:
		return []int{512, 1024, 2048, 4096}[r.IntN(4)]
	default:
		return 16 * (1 + r.IntN(512))
	}
}

// xtsLen favours lengths that are not whole blocks, so that ciphertext
// stealing runs in about half the cases.
func xtsLen(r *rand.Rand) int {
	switch r.IntN(4) {
	case 0:
		return 16 + r.IntN(32) // 16..47: one block plus a tail
	case 1:
		return []int{512, 4096}[r.IntN(2)]
	default:
		return 16 + r.IntN(8192)
	}
}

var cases = map[string]algCase{
	"essiv(cbc(aes),sha256)": {"essiv(cbc(aes),sha256)", []int{16, 24, 32}, 16, blocks},
	"xts(aes)":               {"xts(aes)", []int{32, 48, 64}, 16, xtsLen},
	"cbc(aes)":               {"cbc(aes)", []int{16, 24, 32}, 16, blocks},
	"xts(serpent)":           {"xts(serpent)", []int{32, 48, 64}, 16, xtsLen},
	"cbc(twofish)":           {"cbc(twofish)", []int{16, 24, 32}, 16, blocks},
	"ctr(aes)":               {"ctr(aes)", []int{16, 24, 32}, 16, func(r *rand.Rand) int { return 1 + r.IntN(4096) }},
	"lrw(aes)":               {"lrw(aes)", []int{32, 40, 48}, 16, blocks},
	"adiantum(xchacha12,aes)": {"adiantum(xchacha12,aes)", []int{32}, 32, func(r *rand.Rand) int {
		return 16 + r.IntN(8192)
	}},
}

func main() {
	n := flag.Int("n", 1000, "random cases per algorithm")
	seed := flag.Uint64("seed", 1, "random seed")
	algs := flag.String("algs", "essiv(cbc(aes),sha256);xts(aes);cbc(aes)", "algorithms, ';'-separated")
	flag.Parse()
	failed := false
	for _, name := range strings.Split(*algs, ";") {
		ac, ok := cases[name]
		if !ok {
			fmt.Printf("@@C %s - error=unknown-algorithm\n", name)
			failed = true
			continue
		}
		if !check(ac, *n, *seed) {
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

// kernelDriver names the driver the kernel picks for name: the
// highest-priority entry of /proc/crypto.
func kernelDriver(name string) string {
	data, err := os.ReadFile("/proc/crypto")
	if err != nil {
		return "?"
	}
	best, bestPrio := "?", -1
	for _, blk := range strings.Split(string(data), "\n\n") {
		f := map[string]string{}
		for _, l := range strings.Split(blk, "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok {
				f[strings.TrimSpace(k)] = strings.TrimSpace(v)
			}
		}
		var prio int
		fmt.Sscan(f["priority"], &prio)
		if f["name"] == name && f["type"] == "skcipher" && f["selftest"] == "passed" && prio > bestPrio {
			best, bestPrio = f["driver"], prio
		}
	}
	return best
}

func check(ac algCase, n int, seed uint64) bool {
	k, err := newKernel(ac.name)
	if err != nil {
		fmt.Printf("@@C %s - error=%q\n", ac.name, err.Error())
		return false
	}
	defer k.close()
	all, err := capi.Drivers(ac.name)
	if err != nil {
		fmt.Printf("@@C %s - error=%q\n", ac.name, err.Error())
		return false
	}
	var drivers []*capi.Alg
	for _, d := range all {
		if err := d.SelfTest(); err != nil {
			fmt.Printf("@@S %s %s skipped: %v\n", ac.name, d.Driver, err)
			continue
		}
		drivers = append(drivers, d)
	}
	if len(drivers) == 0 {
		fmt.Printf("@@C %s - error=no-capi-driver\n", ac.name)
		return false
	}
	kd := kernelDriver(ac.name)
	// The kernel answers each random case once; every capi driver is then
	// compared with that answer.
	bad := make([]int, len(drivers))
	cts, kernelErrs := 0, 0
	r := rand.New(rand.NewPCG(seed, uint64(len(ac.name))))
	for i := 0; i < n; i++ {
		ks := ac.keySizes[r.IntN(len(ac.keySizes))]
		key := randBytes(r, ks)
		if strings.HasPrefix(ac.name, "xts(") {
			// The kernel refuses XTS keys whose halves are equal.
			for bytes.Equal(key[:ks/2], key[ks/2:]) {
				key = randBytes(r, ks)
			}
		}
		iv := randBytes(r, ac.ivSize)
		l := ac.length(r)
		if l%16 != 0 {
			cts++
		}
		pt := randBytes(r, l)
		kct, kpt, err := k.encDec(key, iv, pt)
		if err != nil {
			fmt.Printf("@@E %s kernel (key %d, len %d): %v\n", ac.name, ks, l, err)
			kernelErrs++
			continue
		}
		if !bytes.Equal(kpt, pt) {
			fmt.Printf("@@E %s kernel does not decrypt its own output (key %d, len %d)\n", ac.name, ks, l)
			kernelErrs++
			continue
		}
		for j, d := range drivers {
			t, err := d.Skcipher(key)
			if err != nil {
				fmt.Printf("@@E %s %s key %d: %v\n", ac.name, d.Driver, ks, err)
				bad[j]++
				continue
			}
			gct := make([]byte, l)
			eerr := t.Encrypt(gct, pt, iv)
			gpt := make([]byte, l)
			derr := t.Decrypt(gpt, kct, iv)
			t.Wipe()
			if eerr != nil || derr != nil || !bytes.Equal(kct, gct) || !bytes.Equal(gpt, pt) {
				if bad[j] < 3 {
					fmt.Printf("@@E %s %s mismatch: key=%s iv=%s len=%d (errors %v, %v)\n", ac.name, d.Driver,
						hex.EncodeToString(key), hex.EncodeToString(iv), l, eerr, derr)
				}
				bad[j]++
			}
		}
	}
	ok := kernelErrs == 0
	extra := ""
	if cts > 0 {
		extra = fmt.Sprintf(" partial-block=%d", cts)
	}
	for j, d := range drivers {
		fmt.Printf("@@C %s %s cases=%d mismatches=%d kernel=%s%s\n", ac.name, d.Driver, n, bad[j]+kernelErrs, kd, extra)
		if bad[j] > 0 {
			ok = false
		}
	}
	return ok
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// kernel is one AF_ALG skcipher: a bound transform socket.
type kernel struct{ tfm int }

func newKernel(name string) (*kernel, error) {
	fd, err := unix.Socket(unix.AF_ALG, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("AF_ALG socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrALG{Type: "skcipher", Name: name}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("AF_ALG bind %s: %w", name, err)
	}
	return &kernel{tfm: fd}, nil
}

func (k *kernel) close() { unix.Close(k.tfm) }

// encDec sets the key, accepts an operation socket, encrypts in and
// decrypts the result on it.
func (k *kernel) encDec(key, iv, in []byte) (ct, pt []byte, err error) {
	if err := unix.SetsockoptString(k.tfm, unix.SOL_ALG, unix.ALG_SET_KEY, string(key)); err != nil {
		return nil, nil, fmt.Errorf("setkey: %w", err)
	}
	// unix.Accept cannot convert AF_ALG's empty peer address; accept(2)
	// with no address does.
	op, _, errno := unix.Syscall6(unix.SYS_ACCEPT4, uintptr(k.tfm), 0, 0, unix.SOCK_CLOEXEC, 0, 0)
	if errno != 0 {
		return nil, nil, fmt.Errorf("accept: %w", errno)
	}
	defer unix.Close(int(op))
	if ct, err = crypt(int(op), iv, in, true); err != nil {
		return nil, nil, err
	}
	pt, err = crypt(int(op), iv, ct, false)
	return ct, pt, err
}

// crypt runs one request on an operation socket.
func crypt(op int, iv, in []byte, enc bool) ([]byte, error) {
	o := uint32(unix.ALG_OP_DECRYPT)
	if enc {
		o = unix.ALG_OP_ENCRYPT
	}
	oob := make([]byte, unix.CmsgSpace(4)+unix.CmsgSpace(4+len(iv)))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level, h.Type = unix.SOL_ALG, unix.ALG_SET_OP
	h.SetLen(unix.CmsgLen(4))
	binary.NativeEndian.PutUint32(oob[unix.CmsgLen(0):], o)
	h2 := (*unix.Cmsghdr)(unsafe.Pointer(&oob[unix.CmsgSpace(4)]))
	h2.Level, h2.Type = unix.SOL_ALG, unix.ALG_SET_IV
	h2.SetLen(unix.CmsgLen(4 + len(iv)))
	off := unix.CmsgSpace(4) + unix.CmsgLen(0)
	binary.NativeEndian.PutUint32(oob[off:], uint32(len(iv)))
	copy(oob[off+4:], iv)
	if _, err := unix.SendmsgN(op, in, oob, nil, 0); err != nil {
		return nil, fmt.Errorf("sendmsg: %w", err)
	}
	out := make([]byte, len(in))
	for got := 0; got < len(out); {
		m, err := unix.Read(op, out[got:])
		if err != nil {
			return nil, fmt.Errorf("read: %w", err)
		}
		if m == 0 {
			return nil, fmt.Errorf("read: short (%d of %d)", got, len(out))
		}
		got += m
	}
	return out, nil
}
