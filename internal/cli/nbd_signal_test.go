package cli

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
	"github.com/blkcrypt/blkcrypt/nbd/nbdclient/nbdtest"
)

// TestSignalStopsNBDWait: SIGTERM or SIGINT to a blkcrypt process that an
// NBD server stalls (one that never greets; one that answers every read
// with error chunks that never end, one every 20 ms; one that stops
// answering once the device is open) makes it exit at once, non-zero,
// with one line on stderr. Before, it waited for the 30 s handshake
// deadline or the 2 min request timeout.
func TestSignalStopsNBDWait(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "blkcrypt")
	build := exec.Command("go", "build", "-o", bin, "./cmd/blkcrypt")
	build.Dir = lukstest.ModuleRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	pass := writeFile(t, dir, "pass", []byte("pw"))

	drip := &nbdtest.Fake{Size: 20 << 20, Structured: true}
	dripCh := make(chan struct{}, 1)
	drip.Reply = func(c *nbdtest.FakeConn, cmd uint16, h, off uint64, n uint32, d []byte) error {
		if cmd != nbdtest.CmdRead {
			return nbdtest.Honest(c, cmd, h, off, n, d)
		}
		select {
		case dripCh <- struct{}{}:
		default:
		}
		for {
			if err := nbdtest.Chunk(c, 0, nbdtest.ReplyTypeError, h, nbdtest.ErrorChunk(uint32(syscall.EIO), "not yet")); err != nil {
				return err
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// A server that answers Dial's probe of the last byte, then never
	// answers another read (the header's): the device is open by then.
	late := &nbdtest.Fake{Size: 20 << 20, Structured: true}
	lateCh := make(chan struct{}, 1)
	late.Reply = func(c *nbdtest.FakeConn, cmd uint16, h, off uint64, n uint32, d []byte) error {
		if cmd == nbdtest.CmdRead && off+uint64(n) < 20<<20 {
			select {
			case lateCh <- struct{}{}:
			default:
			}
			return nil // silence
		}
		return nbdtest.Honest(c, cmd, h, off, n, d)
	}
	for _, c := range []struct {
		name string
		uri  string
		sig  syscall.Signal
	}{
		{"never greets", nbdtest.Silent(t), syscall.SIGTERM},
		{"endless error chunks", drip.ServeUnix(t), syscall.SIGINT},
		{"stalls after opening", late.ServeUnix(t), syscall.SIGTERM},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(bin, "read", c.uri, "--key-file", pass, "--length", "512")
			var errb bytes.Buffer
			cmd.Stderr = &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			select {
			case err := <-exited:
				t.Fatalf("exited before the signal: %v, %q", err, errb.String())
			case <-time.After(500 * time.Millisecond):
			}
			sent := time.Now()
			cmd.Process.Signal(c.sig)
			var err error
			select {
			case err = <-exited:
			case <-time.After(5 * time.Second):
				cmd.Process.Kill()
				<-exited
				t.Fatalf("still running 5 s after %v; stderr %q", c.sig, errb.String())
			}
			took := time.Since(sent)
			if err == nil {
				t.Fatalf("exited 0 after %v", c.sig)
			}
			if _, ok := err.(*exec.ExitError); !ok || cmd.ProcessState.ExitCode() <= 0 {
				t.Fatalf("did not exit with a code of its own (killed by the signal?): %v", err)
			}
			if took > 2*time.Second {
				t.Errorf("exited %v after %v", took, c.sig)
			}
			e := strings.TrimSpace(errb.String())
			t.Logf("%v: exit %d after %v: %s", c.sig, cmd.ProcessState.ExitCode(), took.Round(time.Millisecond), e)
			if strings.Count(e, "\n") != 0 || !strings.HasPrefix(e, "blkcrypt: ") || !strings.Contains(e, "cancel") {
				t.Errorf("stderr %q, want one line saying it was cancelled", errb.String())
			}
		})
	}
	for name, ch := range map[string]chan struct{}{"dripping": dripCh, "late": lateCh} {
		select {
		case <-ch:
		default:
			t.Errorf("the %s server never got the read it stalls on: its case tested nothing", name)
		}
	}
}
