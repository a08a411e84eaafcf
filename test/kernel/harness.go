//go:build linux

// Package kernel boots a Debian kernel under qemu with a busybox initramfs
// that holds cryptsetup, so that tests can check blkcrypt against the real
// dm-crypt and the kernel's crypto API (see docs/testing.md).
//
// Everything comes from Debian packages at test time: linux-image-amd64
// (unpacked with dpkg -x), busybox-static and the host's cryptsetup with the
// shared libraries ldd finds. The kernel and a base initramfs are cached
// under a directory keyed by the package versions; each boot appends a small
// second cpio archive with /init, the test script and its files.
package kernel

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// harnessVersion changes whenever the layout of the cached base initramfs
// changes, so that old cache entries are not reused.
const harnessVersion = 2

// Environment variables.
const (
	// EnvCache overrides the cache directory (default
	// $XDG_CACHE_HOME/blkcrypt-kernel or ~/.cache/blkcrypt-kernel).
	EnvCache = "BLKCRYPT_KERNEL_CACHE"
	// EnvAccel forces the accelerator: "kvm" or "tcg". By default KVM is
	// tried when /dev/kvm opens, and TCG is used if KVM fails to boot.
	EnvAccel = "BLKCRYPT_KERNEL_ACCEL"
	// EnvTests set to "0" skips the kernel tests; "require" turns a
	// missing qemu into a failure (it is one anyway outside -short).
	EnvTests = "BLKCRYPT_KERNEL_TESTS"
	// EnvKeep keeps each boot's initramfs and console log in the cache's
	// runs/ directory.
	EnvKeep = "BLKCRYPT_KERNEL_KEEP"
)

//go:embed init.sh
var initScript []byte

// Kernel is a prepared (cached) kernel and base initramfs.
type Kernel struct {
	Dir      string            // cache entry
	Vmlinuz  string            // kernel image
	Base     string            // base initramfs (cpio)
	Release  string            // uname -r of the guest
	Packages map[string]string // package → version that built it
	Qemu     string            // qemu-system-x86_64
}

// CacheDir is where prepared kernels live.
func CacheDir() (string, error) {
	if d := os.Getenv(EnvCache); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "blkcrypt-kernel"), nil
}

var (
	prepOnce sync.Once
	prepK    *Kernel
	prepErr  error
)

// Get prepares the kernel once per process.
func Get(logf func(string, ...any)) (*Kernel, error) {
	prepOnce.Do(func() { prepK, prepErr = Prepare(logf) })
	return prepK, prepErr
}

// ErrNoQemu means qemu-system-x86_64 is not installed.
var ErrNoQemu = errors.New("qemu-system-x86_64 not found (Debian package qemu-system-x86)")

// aptShow returns the fields of the candidate versions of packages, one
// map per package, from a single apt-cache call (each call loads the whole
// package cache).
func aptShow(pkgs ...string) (map[string]map[string]string, error) {
	out, err := exec.Command("apt-cache", append([]string{"show", "--no-all-versions"}, pkgs...)...).Output()
	if err != nil || len(bytes.TrimSpace(out)) == 0 {
		return nil, fmt.Errorf("apt-cache show %s: %v", strings.Join(pkgs, " "), err)
	}
	all := map[string]map[string]string{}
	for _, stanza := range strings.Split(string(out), "\n\n") {
		f := map[string]string{}
		for _, l := range strings.Split(stanza, "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && !strings.HasPrefix(l, " ") {
				f[k] = strings.TrimSpace(v)
			}
		}
		if p := f["Package"]; p != "" && all[p] == nil {
			all[p] = f
		}
	}
	for _, p := range pkgs {
		if all[p] == nil {
			return nil, fmt.Errorf("apt-cache show: no candidate for %s", p)
		}
	}
	return all, nil
}

// kernelDepRE matches linux-image-amd64's dependency on the real image
// package, which it pins to one version: "linux-image-6.1.0-57-amd64 (=
// 6.1.192-3)".
var kernelDepRE = regexp.MustCompile(`^(linux-image-[0-9][^ ,]*) \(= ([^)]+)\)`)

// resolvePackages finds the real kernel package behind linux-image-amd64
// and the versions the cache is keyed by.
func resolvePackages() (map[string]string, string, error) {
	f, err := aptShow("linux-image-amd64", "busybox-static")
	if err != nil {
		return nil, "", err
	}
	pk := map[string]string{"busybox-static": f["busybox-static"]["Version"]}
	kpkg := ""
	for _, d := range strings.Split(f["linux-image-amd64"]["Depends"], ",") {
		if m := kernelDepRE.FindStringSubmatch(strings.TrimSpace(d)); m != nil {
			kpkg = m[1]
			pk[kpkg] = m[2]
			break
		}
	}
	if kpkg == "" {
		return nil, "", fmt.Errorf("linux-image-amd64 depends on no kernel image: %q", f["linux-image-amd64"]["Depends"])
	}
	return pk, kpkg, nil
}

// hostBinary returns an ELF program of the host and the files the guest
// needs to run it (the interpreter and every library ldd lists).
func hostBinary(name string) (string, []string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		for _, d := range []string{"/usr/sbin", "/sbin"} {
			if _, serr := os.Stat(filepath.Join(d, name)); serr == nil {
				p, err = filepath.Join(d, name), nil
				break
			}
		}
	}
	if err != nil {
		return "", nil, fmt.Errorf("%s not found on the host: %w", name, err)
	}
	out, err := exec.Command("ldd", p).Output()
	if err != nil {
		return "", nil, fmt.Errorf("ldd %s: %w", p, err)
	}
	var libs []string
	for _, l := range strings.Split(string(out), "\n") {
		l = strings.TrimSpace(l)
		if _, r, ok := strings.Cut(l, "=> "); ok {
			l = r
		}
		if strings.HasPrefix(l, "/") {
			libs = append(libs, strings.Fields(l)[0])
		} else if strings.Contains(l, "not found") {
			return "", nil, fmt.Errorf("ldd %s: %s", p, l)
		}
	}
	return p, libs, nil
}

func fileHash(h io.Writer, paths ...string) error {
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %d\n", p, len(data))
		h.Write(data)
	}
	return nil
}

// Prepare returns the cached kernel for the current package versions,
// building it first if needed (download, unpack, initramfs: about half a
// minute).
func Prepare(logf func(string, ...any)) (*Kernel, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return nil, ErrNoQemu
	}
	cache, err := CacheDir()
	if err != nil {
		return nil, err
	}
	csBin, csLibs, err := hostBinary("cryptsetup")
	if err != nil {
		return nil, fmt.Errorf("%w (Debian package cryptsetup-bin)", err)
	}
	pk, kpkg, err := resolvePackages()
	if err != nil {
		if k := newestEntry(cache); k != nil {
			logf("kernel: %v; using the cached %s", err, k.Dir)
			k.Qemu = qemu
			return k, nil
		}
		return nil, err
	}
	h := sha256.New()
	fmt.Fprintf(h, "harness %d\n", harnessVersion)
	for _, m := range guestModules {
		fmt.Fprintf(h, "module %s\n", m.name)
	}
	if err := fileHash(h, append([]string{csBin}, csLibs...)...); err != nil {
		return nil, err
	}
	key := fmt.Sprintf("%s_%s+busybox_%s+%s", kpkg, pk[kpkg], pk["busybox-static"], hex.EncodeToString(h.Sum(nil))[:12])
	key = strings.NewReplacer(":", "%3a", "/", "_").Replace(key)
	dir := filepath.Join(cache, key)
	if k, err := loadEntry(dir); err == nil {
		k.Qemu = qemu
		return k, nil
	}

	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, err
	}
	unlock, err := lockFile(filepath.Join(cache, "lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	if k, err := loadEntry(dir); err == nil { // built while we waited
		k.Qemu = qemu
		return k, nil
	}
	t0 := time.Now()
	debs := filepath.Join(cache, "debs")
	kdeb, err := download(debs, kpkg, pk[kpkg], logf)
	if err != nil {
		return nil, err
	}
	bdeb, err := download(debs, "busybox-static", pk["busybox-static"], logf)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(cache, "build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	root := filepath.Join(tmp, "root")
	for _, d := range []string{kdeb, bdeb} {
		if out, err := exec.Command("dpkg", "-x", d, root).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("dpkg -x %s: %v\n%s", d, err, out)
		}
	}
	if err := buildEntry(root, filepath.Join(tmp, "entry"), csBin, csLibs, pk); err != nil {
		return nil, err
	}
	// Drop older entries and packages: only the current ones are used.
	olds, _ := filepath.Glob(filepath.Join(cache, "linux-image-*"))
	for _, o := range olds {
		os.RemoveAll(o)
	}
	all, _ := filepath.Glob(filepath.Join(debs, "*.deb"))
	for _, a := range all {
		if a != kdeb && a != bdeb {
			os.Remove(a)
		}
	}
	if err := os.Rename(filepath.Join(tmp, "entry"), dir); err != nil {
		return nil, err
	}
	logf("kernel: prepared %s in %v", dir, time.Since(t0).Round(time.Millisecond))
	k, err := loadEntry(dir)
	if err != nil {
		return nil, err
	}
	k.Qemu = qemu
	return k, nil
}

// download fetches pkg=version into dir with apt-get download, running
// apt-get update once if the package lists are stale.
func download(dir, pkg, version string, logf func(string, ...any)) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	find := func() string {
		all, _ := filepath.Glob(filepath.Join(dir, pkg+"_*.deb"))
		v := strings.ReplaceAll(version, ":", "%3a")
		for _, a := range all {
			if strings.HasPrefix(filepath.Base(a), pkg+"_"+v+"_") {
				return a
			}
		}
		return ""
	}
	if p := find(); p != "" {
		return p, nil
	}
	logf("kernel: apt-get download %s=%s", pkg, version)
	run := func() ([]byte, error) {
		cmd := exec.Command("apt-get", "download", "-q", pkg+"="+version)
		cmd.Dir = dir
		return cmd.CombinedOutput()
	}
	out, err := run()
	if err != nil && os.Geteuid() == 0 {
		logf("kernel: apt-get download failed (%v); apt-get update", err)
		if o, err := exec.Command("apt-get", "update", "-qq").CombinedOutput(); err != nil {
			return "", fmt.Errorf("apt-get update: %v\n%s", err, o)
		}
		out, err = run()
	}
	if err != nil {
		return "", fmt.Errorf("apt-get download %s=%s: %v\n%s", pkg, version, err, out)
	}
	if p := find(); p != "" {
		return p, nil
	}
	return "", fmt.Errorf("apt-get download %s=%s left no .deb in %s", pkg, version, dir)
}

func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// buildEntry writes vmlinuz, base.cpio and manifest into out from the
// unpacked packages in root.
func buildEntry(root, out, csBin string, csLibs []string, pk map[string]string) error {
	mods, _ := filepath.Glob(filepath.Join(root, "lib/modules/*"))
	if len(mods) != 1 {
		return fmt.Errorf("expected one lib/modules/<release> in the kernel package, found %v", mods)
	}
	release := filepath.Base(mods[0])
	vmlinuz := filepath.Join(root, "boot", "vmlinuz-"+release)
	order, err := resolveModules(mods[0])
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if err := copyFile(vmlinuz, filepath.Join(out, "vmlinuz")); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(out, "base.cpio"))
	if err != nil {
		return err
	}
	defer f.Close()
	c := newCPIO(f)
	for _, d := range []string{"/proc", "/sys", "/dev", "/run", "/tmp", "/mnt", "/etc", "/bin", "/sbin", "/usr/bin", "/usr/sbin", "/kt"} {
		c.Mkdir(d)
	}
	add := func(src, dst string, perm uint32) error {
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		c.File(dst, perm, data)
		return nil
	}
	if err := add(filepath.Join(root, "bin/busybox"), "/bin/busybox", 0o755); err != nil {
		return err
	}
	c.Symlink("/bin/sh", "busybox")
	var load []string
	for _, m := range order {
		dst := "/lib/modules/" + release + "/" + m.name + ".ko"
		if err := add(m.path, dst, 0o644); err != nil {
			return err
		}
		load = append(load, m.name)
	}
	c.File("/etc/kt/modules", 0o644, []byte(strings.Join(load, "\n")+"\n"))
	if err := add(csBin, "/sbin/cryptsetup", 0o755); err != nil {
		return err
	}
	for _, l := range csLibs {
		real, err := filepath.EvalSymlinks(l)
		if err != nil {
			return err
		}
		if err := add(real, l, 0o755); err != nil {
			return err
		}
	}
	if err := c.Close(); err != nil {
		return err
	}
	var man bytes.Buffer
	fmt.Fprintf(&man, "release %s\n", release)
	keys := make([]string, 0, len(pk))
	for p := range pk {
		keys = append(keys, p)
	}
	sort.Strings(keys)
	for _, p := range keys {
		fmt.Fprintf(&man, "package %s %s\n", p, pk[p])
	}
	fmt.Fprintf(&man, "cryptsetup %s\n", csBin)
	fmt.Fprintf(&man, "modules %s\n", strings.Join(load, " "))
	return os.WriteFile(filepath.Join(out, "manifest"), man.Bytes(), 0o644)
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o644)
}

func loadEntry(dir string) (*Kernel, error) {
	data, err := os.ReadFile(filepath.Join(dir, "manifest"))
	if err != nil {
		return nil, err
	}
	k := &Kernel{Dir: dir, Vmlinuz: filepath.Join(dir, "vmlinuz"), Base: filepath.Join(dir, "base.cpio"), Packages: map[string]string{}}
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 2 && f[0] == "release":
			k.Release = f[1]
		case len(f) == 3 && f[0] == "package":
			k.Packages[f[1]] = f[2]
		}
	}
	for _, p := range []string{k.Vmlinuz, k.Base} {
		if _, err := os.Stat(p); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// newestEntry is the most recent complete cache entry, for when apt-cache
// cannot name the current versions.
func newestEntry(cache string) *Kernel {
	all, _ := filepath.Glob(filepath.Join(cache, "linux-image-*"))
	var best *Kernel
	var bestT time.Time
	for _, d := range all {
		st, err := os.Stat(filepath.Join(d, "manifest"))
		if err != nil {
			continue
		}
		if k, err := loadEntry(d); err == nil && st.ModTime().After(bestT) {
			best, bestT = k, st.ModTime()
		}
	}
	return best
}

// Disk is one virtio disk of a boot. The guest sees it as
// /dev/disk/<Name> (matched by its virtio serial number).
type Disk struct {
	Name     string // at most 20 characters: [A-Za-z0-9_-]
	Path     string // raw image on the host
	ReadOnly bool
}

// Boot describes one guest run.
type Boot struct {
	// Script is a busybox sh script run as root in /kt after modules are
	// loaded and the disks are linked under /dev/disk.
	Script string
	// Files are extra files for the initramfs, by absolute guest path.
	Files map[string][]byte
	// Executables are host files copied into the guest (guest path → host
	// path) with mode 0755: static test programs.
	Executables map[string]string
	// Programs are host programs (e2fsck, nbd-client, …) copied into the
	// guest at their host paths, with every shared library ldd lists.
	Programs []string
	Disks    []Disk
	// Timeout for the whole boot; the guest is killed after it.
	Timeout time.Duration
	// MemoryMiB defaults to 1024, CPUs to 2.
	MemoryMiB, CPUs int
	// TPMSocket, if set, is the control socket of a running swtpm
	// ("swtpm socket --tpm2 --ctrl type=unixio,path=TPMSocket"), which
	// the guest sees as a TIS TPM 2.0 (/dev/tpm0, /dev/tpmrm0).
	TPMSocket string
}

// Result is what a boot printed.
type Result struct {
	// Output is what the script printed (between the harness markers).
	Output string
	// Console is the whole serial console, kernel messages included.
	Console string
	// ExitCode is the script's exit status.
	ExitCode int
	// Accel is "kvm" or "tcg"; Duration the wall-clock time of the boot.
	Accel    string
	Duration time.Duration
}

// Lines returns the script's output lines that start with prefix, with
// the prefix and surrounding blanks removed.
func (r *Result) Lines(prefix string) []string {
	var out []string
	for _, l := range strings.Split(r.Output, "\n") {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			out = append(out, strings.TrimSpace(rest))
		}
	}
	return out
}

// MaxDisks is how many disks one boot can take (PCI slots of the root bus
// and one bridge).
const MaxDisks = 50

var diskNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,20}$`)

// Run boots the guest and waits for it to power off.
func (k *Kernel) Run(ctx context.Context, b Boot) (*Result, error) {
	if len(b.Disks) > MaxDisks {
		return nil, fmt.Errorf("%d disks; one boot takes at most %d", len(b.Disks), MaxDisks)
	}
	seen := map[string]bool{}
	for _, d := range b.Disks {
		if !diskNameRE.MatchString(d.Name) || seen[d.Name] {
			return nil, fmt.Errorf("bad or duplicate disk name %q", d.Name)
		}
		seen[d.Name] = true
	}
	if b.Timeout == 0 {
		b.Timeout = 5 * time.Minute
	}
	if b.MemoryMiB == 0 {
		b.MemoryMiB = 1024
	}
	if b.CPUs == 0 {
		b.CPUs = 2
	}
	work, err := os.MkdirTemp("", "blkcrypt-kernel-run-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	initrd := filepath.Join(work, "initrd")
	if err := k.writeInitrd(initrd, b); err != nil {
		return nil, err
	}
	r, err := k.boot(ctx, b, initrd, k.accel(ctx))
	if keep := os.Getenv(EnvKeep); keep != "" && r != nil {
		k.keep(initrd, r)
	}
	return r, err
}

func (k *Kernel) keep(initrd string, r *Result) {
	dir := filepath.Join(filepath.Dir(k.Dir), "runs", time.Now().Format("20060102-150405.000"))
	if os.MkdirAll(dir, 0o755) == nil {
		copyFile(initrd, filepath.Join(dir, "initrd"))
		os.WriteFile(filepath.Join(dir, "console.log"), []byte(r.Console), 0o644)
	}
}

var (
	accelOnce sync.Once
	accelName string
)

// accel picks the accelerator once per process: EnvAccel if set, else KVM
// if /dev/kvm opens and a probe boot with -cpu host reaches the script,
// else TCG. The probe's verdict is cached per host kernel and qemu binary,
// because a KVM that cannot run the guest may hang rather than fail (as
// under nested virtualisation without the needed MSRs).
func (k *Kernel) accel(ctx context.Context) string {
	accelOnce.Do(func() {
		if a := os.Getenv(EnvAccel); a == "kvm" || a == "tcg" {
			accelName = a
			return
		}
		accelName = "tcg"
		f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
		if err != nil {
			return
		}
		f.Close()
		var uts syscall.Utsname
		syscall.Uname(&uts)
		rel := make([]byte, 0, len(uts.Release))
		for _, c := range uts.Release {
			if c == 0 {
				break
			}
			rel = append(rel, byte(c))
		}
		st, _ := os.Stat(k.Qemu)
		var mt int64
		if st != nil {
			mt = st.ModTime().Unix()
		}
		key := fmt.Sprintf("%s %s %d %s\n", rel, k.Qemu, mt, filepath.Base(k.Dir))
		verdictFile := filepath.Join(filepath.Dir(k.Dir), "kvm-probe")
		if data, err := os.ReadFile(verdictFile); err == nil {
			if v, ok := strings.CutPrefix(string(data), key); ok {
				accelName = strings.TrimSpace(v)
				return
			}
		}
		tmp, err := os.MkdirTemp("", "blkcrypt-kvm-probe-")
		if err != nil {
			return
		}
		defer os.RemoveAll(tmp)
		initrd := filepath.Join(tmp, "initrd")
		b := Boot{Script: "true", Timeout: 30 * time.Second, MemoryMiB: 512, CPUs: 1}
		if k.writeInitrd(initrd, b) != nil {
			return
		}
		if _, err := k.boot(ctx, b, initrd, "kvm"); err == nil {
			accelName = "kvm"
		}
		os.WriteFile(verdictFile, []byte(key+accelName+"\n"), 0o644)
	})
	return accelName
}

func (k *Kernel) writeInitrd(path string, b Boot) error {
	base, err := os.ReadFile(k.Base)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Write(base); err != nil {
		return err
	}
	c := newCPIO(f)
	c.File("/init", 0o755, initScript)
	c.File("/kt/run.sh", 0o755, []byte(b.Script))
	c.File("/etc/kt/ndisks", 0o644, []byte(strconv.Itoa(len(b.Disks))+"\n"))
	names := make([]string, 0, len(b.Files))
	for n := range b.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c.File(n, 0o644, b.Files[n])
	}
	for _, name := range b.Programs {
		bin, libs, err := hostBinary(name)
		if err != nil {
			return err
		}
		for _, f := range append([]string{bin}, libs...) {
			real, err := filepath.EvalSymlinks(f)
			if err != nil {
				return err
			}
			data, err := os.ReadFile(real)
			if err != nil {
				return err
			}
			c.File(f, 0o755, data)
		}
	}
	names = names[:0]
	for n := range b.Executables {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		data, err := os.ReadFile(b.Executables[n])
		if err != nil {
			return err
		}
		c.File(n, 0o755, data)
	}
	return c.Close()
}

func (k *Kernel) boot(ctx context.Context, b Boot, initrd, accel string) (*Result, error) {
	args := []string{
		"-nodefaults", "-no-user-config", "-M", "pc", "-display", "none",
		"-m", strconv.Itoa(b.MemoryMiB), "-smp", strconv.Itoa(b.CPUs),
		"-serial", "stdio", "-monitor", "none", "-no-reboot",
		"-kernel", k.Vmlinuz, "-initrd", initrd,
		"-append", "console=ttyS0 loglevel=1 panic=-1 rdinit=/init",
	}
	if accel == "kvm" {
		args = append(args, "-accel", "kvm", "-cpu", "host")
	} else {
		args = append(args, "-accel", "tcg", "-cpu", "max")
	}
	if b.TPMSocket != "" {
		if strings.Contains(b.TPMSocket, ",") {
			return nil, fmt.Errorf("TPM socket path %q: qemu's option syntax takes no commas", b.TPMSocket)
		}
		args = append(args, "-chardev", "socket,id=chrtpm,path="+b.TPMSocket,
			"-tpmdev", "emulator,id=tpm0,chardev=chrtpm", "-device", "tpm-tis,tpmdev=tpm0")
	}
	const rootSlots = 24
	if len(b.Disks) > rootSlots {
		args = append(args, "-device", "pci-bridge,id=br1,chassis_nr=1")
	}
	for i, d := range b.Disks {
		ro := "off"
		if d.ReadOnly {
			ro = "on"
		}
		args = append(args, "-drive", fmt.Sprintf("file=%s,if=none,id=d%d,format=raw,readonly=%s,cache=unsafe", d.Path, i, ro))
		dev := fmt.Sprintf("virtio-blk-pci,drive=d%d,serial=%s", i, d.Name)
		if i >= rootSlots {
			dev += fmt.Sprintf(",bus=br1,addr=%d", i-rootSlots+1)
		}
		args = append(args, "-device", dev)
	}
	ctx, cancel := context.WithTimeout(ctx, b.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.Qemu, args...)
	cmd.Stdin = nil
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.WaitDelay = 5 * time.Second
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	var console bytes.Buffer
	sc := bufio.NewReader(out)
	for {
		line, err := sc.ReadString('\n')
		console.WriteString(strings.ReplaceAll(line, "\r", ""))
		if err != nil {
			break
		}
	}
	werr := cmd.Wait()
	r := &Result{Console: console.String(), Accel: accel, Duration: time.Since(t0), ExitCode: -1}
	if stderr.Len() > 0 {
		r.Console += "\n[qemu stderr]\n" + stderr.String()
	}
	begin := strings.Index(r.Console, "@@KT-BEGIN\n")
	end := strings.LastIndex(r.Console, "\n@@KT-END rc=")
	if begin < 0 || end < begin {
		why := "the guest did not finish its script"
		if ctx.Err() != nil {
			why = fmt.Sprintf("timeout after %v", b.Timeout)
		}
		return r, fmt.Errorf("kernel boot (%s): %s (qemu: %v)\n%s", accel, why, werr, tail(r.Console, 4000))
	}
	r.Output = r.Console[begin+len("@@KT-BEGIN\n") : end+1]
	rc := r.Console[end+len("\n@@KT-END rc="):]
	if i := strings.IndexByte(rc, '\n'); i >= 0 {
		rc = rc[:i]
	}
	r.ExitCode, _ = strconv.Atoi(strings.TrimSpace(rc))
	if !strings.Contains(r.Console, "@@KT-POWEROFF") {
		return r, fmt.Errorf("kernel boot (%s): the guest did not power off cleanly (qemu: %v)\n%s", accel, werr, tail(r.Console, 2000))
	}
	if werr != nil {
		return r, fmt.Errorf("kernel boot (%s): qemu: %v\n%s", accel, werr, tail(r.Console, 2000))
	}
	return r, nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
