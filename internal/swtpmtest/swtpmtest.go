package swtpmtest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// TPM is one running swtpm process.
type TPM struct {
	// TCTI is the TPM in systemd's spelling (swtpm:host=127.0.0.1,port=P)
	// when it was started by Start; TPM2TOOLS_TCTI takes it too.
	TCTI string
	// Port is its TCP server port (the control port is Port+1), for Start.
	Port int
	// Socket is the control socket for qemu's "-tpmdev emulator", for
	// StartForQemu.
	Socket string
	// StateDir holds the TPM's state (its seeds, NV, PCR bank config).
	StateDir string

	cmd    *exec.Cmd
	mu     sync.Mutex
	out    bytes.Buffer
	exited chan struct{}
}

// Output is what swtpm printed so far.
func (s *TPM) Output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

func (s *TPM) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.Write(p)
}

// Start runs swtpm over the state in dir (a fresh temporary directory if
// dir is "") on free loopback ports, started and with its PCRs reset as
// after a power-on (--flags not-need-init,startup-clear), waits until it
// answers, and kills it when the test ends.
func Start(t testing.TB, dir string) *TPM {
	t.Helper()
	bin := testenv.Need(t, "swtpm", "swtpm")
	if dir == "" {
		dir = t.TempDir()
	}
	for attempt := 0; attempt < 5; attempt++ {
		p, ok := freePortPair(t)
		if !ok {
			continue
		}
		s := start(t, bin, dir, "--server", fmt.Sprintf("type=tcp,port=%d,bindaddr=127.0.0.1", p),
			"--ctrl", fmt.Sprintf("type=tcp,port=%d,bindaddr=127.0.0.1", p+1),
			"--flags", "not-need-init,startup-clear")
		s.Port, s.TCTI = p, fmt.Sprintf("swtpm:host=127.0.0.1,port=%d", p)
		if s.wait(t, func() bool {
			c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(p), time.Second)
			if err == nil {
				c.Close()
			}
			return err == nil
		}) {
			return s
		}
		// swtpm exited: another process took a port between our probe
		// and its bind. Try others.
	}
	t.Fatal("swtpm could not start on free loopback ports")
	return nil
}

// StartForQemu runs swtpm over the state in dir with only a control
// socket (dir/ctrl.sock), as qemu's emulator backend wants it: qemu
// initialises the TPM itself. It is killed when the test ends.
func StartForQemu(t testing.TB, dir string) *TPM {
	t.Helper()
	bin := testenv.Need(t, "swtpm", "swtpm")
	sock := filepath.Join(dir, "ctrl.sock")
	os.Remove(sock)
	s := start(t, bin, dir, "--ctrl", "type=unixio,path="+sock)
	s.Socket = sock
	if !s.wait(t, func() bool { _, err := os.Stat(sock); return err == nil }) {
		t.Fatalf("swtpm exited: %s", s.Output())
	}
	return s
}

func start(t testing.TB, bin, dir string, args ...string) *TPM {
	t.Helper()
	s := &TPM{StateDir: dir, exited: make(chan struct{})}
	s.cmd = exec.Command(bin, append([]string{"socket", "--tpm2", "--tpmstate", "dir=" + dir}, args...)...)
	s.cmd.Stdout, s.cmd.Stderr = s, s
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() { s.cmd.Process.Kill(); <-s.exited })
	return s
}

// wait polls ready until it holds (true), swtpm exits (false) or a minute
// passes (the test fails).
func (s *TPM) wait(t testing.TB, ready func() bool) bool {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		select {
		case <-s.exited:
			return false
		default:
		}
		if ready() {
			return true
		}
		if time.Now().After(deadline) {
			t.Fatalf("swtpm did not listen within a minute: %s", s.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freePortPair finds a free loopback port P whose P+1 is free too.
func freePortPair(t testing.TB) (int, bool) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := l.Addr().(*net.TCPAddr).Port
	l.Close()
	if p >= 65535 {
		return 0, false
	}
	l2, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+1))
	if err != nil {
		return 0, false
	}
	l2.Close()
	return p, true
}

// Stop ends swtpm with SIGTERM, which saves its state, and waits for it;
// the state directory can then be used by another Start or StartForQemu.
func (s *TPM) Stop(t testing.TB) {
	t.Helper()
	select {
	case <-s.exited:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
		t.Fatalf("swtpm did not stop on SIGTERM: %s", s.Output())
	}
}

// Tool runs a tpm2-tools program (tpm2_pcrextend, …) against the TPM,
// which must have been started by Start, and fails the test with its
// output if it fails.
func (s *TPM) Tool(t testing.TB, name string, args ...string) string {
	t.Helper()
	if s.TCTI == "" {
		t.Fatalf("%s: swtpm was started for qemu, not for the host's tools", name)
	}
	bin := testenv.Need(t, name, "tpm2-tools")
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "TPM2TOOLS_TCTI="+s.TCTI)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// ExtendPCR extends PCR pcr of the SHA-256 bank with digest (hex) and
// returns its new value (lower-case hex).
func (s *TPM) ExtendPCR(t testing.TB, pcr int, digest string) string {
	t.Helper()
	s.Tool(t, "tpm2_pcrextend", fmt.Sprintf("%d:sha256=%s", pcr, digest))
	return s.PCR(t, pcr)
}

// PCR returns PCR pcr of the SHA-256 bank (lower-case hex).
func (s *TPM) PCR(t testing.TB, pcr int) string {
	t.Helper()
	out := s.Tool(t, "tpm2_pcrread", fmt.Sprintf("sha256:%d", pcr))
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), fmt.Sprintf("%d : 0x", pcr)); ok {
			return strings.ToLower(strings.TrimSpace(v))
		}
	}
	t.Fatalf("tpm2_pcrread printed no PCR %d: %s", pcr, out)
	return ""
}
