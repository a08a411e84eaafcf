//go:build linux

package cephtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// Cluster is the running single-node cluster.
type Cluster struct {
	Dir  string // its folder (daemons' data, logs, sockets)
	Conf string // its ceph.conf, for CEPH_CONF and qemu's conf=
	// Script is scripts/ceph-single-node.sh, which started it.
	Script string
}

var (
	once     sync.Once
	cluster  *Cluster
	startErr error
	imageSeq atomic.Int64
)

// tools are what a test over the cluster runs, with their Debian packages.
var tools = [][2]string{
	{"ceph-mon", "ceph-mon"}, {"ceph-osd", "ceph-osd"}, {"monmaptool", "ceph-base"},
	{"ceph", "ceph-common"}, {"rbd", "ceph-common"}, {"uuidgen", "uuid-runtime"},
	{"python3", "python3"}, {"qemu-nbd", "qemu-utils"}, {"qemu-img", "qemu-utils"},
}

// qemuRBDDriver is where Debian's qemu-block-extra puts qemu's rbd driver
// (one folder per architecture); without it qemu-nbd and qemu-img do not
// know rbd: at all.
const qemuRBDDriver = "/usr/lib/*/qemu/block-rbd.so"

// NeedTools reports a missing Ceph or qemu tool (testenv.Missing).
func NeedTools(t testing.TB) {
	t.Helper()
	for _, tl := range tools {
		testenv.Need(t, tl[0], tl[1])
	}
	if m, _ := filepath.Glob(qemuRBDDriver); len(m) == 0 {
		// Other distributions keep it elsewhere, or build it in; ask qemu.
		out, _ := exec.Command("qemu-img", "--help").CombinedOutput()
		if !bytes.Contains(out, []byte(" rbd ")) && !bytes.Contains(out, []byte(" rbd\n")) {
			testenv.Missing(t, "qemu's rbd block driver is needed by this test and was not found: apt-get install -y qemu-block-extra")
		}
	}
}

// Get returns the cluster, starting it on the first call of the test
// binary. A cluster that does not start fails the test: the tools are
// there, so it is a real failure, not a missing prerequisite.
func Get(t testing.TB) *Cluster {
	t.Helper()
	NeedTools(t)
	root := testenv.ModuleRoot(t)
	once.Do(func() { cluster, startErr = start(filepath.Join(root, "scripts", "ceph-single-node.sh")) })
	if startErr != nil {
		t.Fatalf("starting the single-node ceph cluster: %v", startErr)
	}
	return cluster
}

// Main runs the tests and stops the cluster if one was started; a test
// package calls it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	Stop()
	os.Exit(code)
}

// Stop stops the cluster (its daemons, by their pid files) and removes its
// folder. Processes still using it (a qemu-nbd) must be stopped first:
// librbd waits for a cluster that is gone.
func Stop() {
	if cluster == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cluster.Script, "stop", cluster.Dir).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "cephtest: stopping the cluster in %s: %v %s\n", cluster.Dir, err, out)
	}
	cluster = nil
}

func start(script string) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "blkcrypt-ceph-")
	if err != nil {
		return nil, err
	}
	// The folder must be short: the admin sockets inside are Unix sockets.
	c := &Cluster{Dir: filepath.Join(dir, "c"), Script: script}
	log, err := os.Create(filepath.Join(dir, "start.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	// The watchdog comes first, so that a test binary killed while the
	// cluster starts leaves nothing behind either. It is its own session
	// and holds none of the test's output pipes, or `go test` would wait
	// for it.
	watchdog := exec.Command("/bin/sh", "-c",
		`while kill -0 "$1" 2>/dev/null; do sleep 1; done; "$2" stop "$3" >/dev/null 2>&1; rm -rf "$4"`,
		"cephtest-watchdog", strconv.Itoa(os.Getpid()), script, c.Dir, dir)
	watchdog.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := watchdog.Start(); err != nil {
		return nil, fmt.Errorf("starting the watchdog: %w", err)
	}
	go watchdog.Wait()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Output to a file, not a pipe: a daemon that kept the pipe open would
	// make the wait below last forever.
	cmd := exec.CommandContext(ctx, script, "start", c.Dir)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), "CEPH_CONF="+filepath.Join(c.Dir, "ceph.conf"))
	err = cmd.Run()
	out, _ := os.ReadFile(log.Name())
	if err != nil {
		exec.Command(script, "stop", c.Dir).Run()
		return nil, fmt.Errorf("%s start: %w\n%s", script, err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "CEPH_CONF="); ok {
			c.Conf = v
		}
	}
	if c.Conf == "" {
		exec.Command(script, "stop", c.Dir).Run()
		return nil, fmt.Errorf("%s start printed no CEPH_CONF:\n%s", script, out)
	}
	return c, nil
}

// Env is the environment of a Ceph client: CEPH_CONF names the cluster.
func (c *Cluster) Env() []string { return append(os.Environ(), "CEPH_CONF="+c.Conf) }

// Run runs a Ceph or qemu client program against the cluster, bounded in
// time, and fails the test with its output if it fails.
func (c *Cluster) Run(t testing.TB, bin string, args ...string) string {
	t.Helper()
	out, err := c.Try(bin, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, out)
	}
	return out
}

// Try is Run returning the error instead of failing.
func (c *Cluster) Try(bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = c.Env()
	// A test binary that dies (a -timeout panic) takes the client with
	// it: once the watchdog has stopped the cluster, librbd would wait for
	// it forever.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// NewImage creates an RBD image of size bytes in the rbd pool with a
// name unique in the run, removed when the test ends.
func (c *Cluster) NewImage(t testing.TB, size int64, extra ...string) string {
	t.Helper()
	name := fmt.Sprintf("img%d", imageSeq.Add(1))
	c.Run(t, "rbd", append([]string{"create", "--size", strconv.FormatInt(size>>20, 10) + "M", "rbd/" + name}, extra...)...)
	t.Cleanup(func() { c.Try("rbd", "rm", "--no-progress", "rbd/"+name) })
	return name
}

// ObjectSize is the image's RBD object size in bytes.
func (c *Cluster) ObjectSize(t testing.TB, image string) int64 {
	t.Helper()
	var info struct {
		ObjectSize int64 `json:"object_size"`
	}
	out := c.Run(t, "rbd", "info", "--format", "json", "rbd/"+image)
	if err := json.Unmarshal([]byte(out), &info); err != nil || info.ObjectSize <= 0 {
		t.Fatalf("rbd info %s: %v: %s", image, err, out)
	}
	return info.ObjectSize
}

// RawSpec is qemu's filename for the image without librbd's encryption:
// the bytes as stored, header and ciphertext.
func (c *Cluster) RawSpec(image string) string { return "rbd:rbd/" + image + ":conf=" + c.Conf }

// EncryptedOpts is qemu's --image-opts for the image through librbd's
// encryption, keyed by the secret object sec0. format is qemu's name:
// "luks" (LUKS1) or "luks2".
func (c *Cluster) EncryptedOpts(image, format string) string {
	return "driver=rbd,pool=rbd,image=" + image + ",conf=" + c.Conf + ",encrypt.format=" + format + ",encrypt.key-secret=sec0"
}

// QemuFormat is qemu's encrypt.format for a LUKS version ("luks1", "luks2").
func QemuFormat(luksType string) string {
	if luksType == "luks1" {
		return "luks"
	}
	return luksType
}

// LibrbdSize is the plaintext size librbd's encryption shows (the image
// less the header and keyslots), as qemu reports it.
func (c *Cluster) LibrbdSize(t testing.TB, image, format, passFile string) int64 {
	t.Helper()
	out := c.Run(t, "qemu-img", "info", "--output=json", "--object", "secret,id=sec0,file="+passFile,
		"--image-opts", c.EncryptedOpts(image, format))
	var info struct {
		Size int64 `json:"virtual-size"`
	}
	// Ceph's clients may log a line before qemu's JSON.
	if i := strings.Index(out, "{"); i >= 0 {
		out = out[i:]
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil || info.Size <= 0 {
		t.Fatalf("qemu-img info: %v: %s", err, out)
	}
	return info.Size
}

// LibrbdWrite writes the file src at the start of the image's plaintext,
// through qemu's rbd driver and librbd's encryption.
func (c *Cluster) LibrbdWrite(t testing.TB, image, format, passFile, src string) {
	t.Helper()
	c.Run(t, "qemu-img", "convert", "-n", "-f", "raw", "--object", "secret,id=sec0,file="+passFile,
		src, "--target-image-opts", c.EncryptedOpts(image, format))
}

// LibrbdRead returns the image's whole plaintext as librbd's encryption
// decrypts it, read through qemu's rbd driver.
func (c *Cluster) LibrbdRead(t testing.TB, image, format, passFile string) []byte {
	t.Helper()
	dst := filepath.Join(t.TempDir(), image+".plain")
	c.Run(t, "qemu-img", "convert", "-O", "raw", "--object", "secret,id=sec0,file="+passFile,
		"--image-opts", c.EncryptedOpts(image, format), dst)
	b, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Export is a qemu-nbd serving an image's raw bytes on a Unix socket.
type Export struct {
	URI  string // nbd+unix:///NAME?socket=PATH
	Sock string
	cmd  *exec.Cmd
	done chan struct{}
	logs bytes.Buffer // read only after done: exec's copier writes it until then
}

// Export starts `qemu-nbd -f raw rbd:rbd/IMAGE:conf=…` (persistent, with
// up to shared clients at once) and returns once it listens. The test's
// cleanup stops it, before Main stops the cluster.
func (c *Cluster) Export(t testing.TB, image string, shared int) *Export {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "nbd.sock")
	e := &Export{Sock: sock, URI: "nbd+unix:///" + image + "?socket=" + sock, done: make(chan struct{})}
	e.cmd = exec.Command("qemu-nbd", "-t", "-k", sock, "-f", "raw", "-x", image, "--cache=writeback",
		"--shared="+strconv.Itoa(shared), c.RawSpec(image))
	e.cmd.Env = c.Env()
	e.cmd.Stdout, e.cmd.Stderr = &e.logs, &e.logs
	// A test binary that dies takes its qemu-nbd with it.
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := e.cmd.Start(); err != nil {
		t.Fatalf("starting qemu-nbd: %v", err)
	}
	go func() { e.cmd.Wait(); close(e.done) }()
	t.Cleanup(func() {
		e.Stop(t)
		if t.Failed() {
			t.Logf("qemu-nbd of %s said:\n%s", image, e.logs.String())
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; {
		if conn, err := net.Dial("unix", sock); err == nil {
			conn.Close()
			return e
		}
		select {
		case <-e.done:
			t.Fatalf("qemu-nbd exited before listening: %s", e.logs.String()) // done: logs complete
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("qemu-nbd did not listen on %s within 30 s", sock)
		}
	}
}

// Stop ends qemu-nbd with SIGTERM, so that it closes the image and
// releases its exclusive lock (a killed one leaves the lock to time out),
// and SIGKILL if it has not exited within 30 s.
func (e *Export) Stop(t testing.TB) {
	select {
	case <-e.done:
		return
	default:
	}
	e.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.done:
	case <-time.After(30 * time.Second):
		t.Errorf("qemu-nbd did not exit within 30 s of SIGTERM; killing it")
		e.cmd.Process.Kill()
		<-e.done
	}
}
