//go:build linux

package kernel

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// need returns the prepared kernel or skips/fails the test: -short and
// BLKCRYPT_KERNEL_TESTS=0 skip; a missing qemu fails with the package to
// install, like the other oracles of the suite.
func need(t *testing.T) *Kernel {
	t.Helper()
	if testing.Short() {
		t.Skip("kernel tests boot qemu; skipped in -short mode")
	}
	if os.Getenv(EnvTests) == "0" {
		// An explicit opt-out by whoever runs the tests, never set by scripts/test.sh.
		t.Skip(EnvTests + "=0")
	}
	k, err := Get(t.Logf)
	if errors.Is(err, ErrNoQemu) && os.Getenv(EnvTests) == "skip-missing" {
		// An explicit request to skip, which CI does not honour.
		testenv.Missing(t, "%v", err)
	}
	if err != nil {
		t.Fatalf("kernel harness: %v", err)
	}
	return k
}

// run boots the guest and fails the test if the boot itself fails.
func run(t *testing.T, k *Kernel, b Boot) *Result {
	t.Helper()
	r, err := k.Run(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("boot: %s, %v, script exit %d", r.Accel, r.Duration.Round(1e6), r.ExitCode)
	return r
}

func TestBootSmoke(t *testing.T) {
	k := need(t)
	r := run(t, k, Boot{Script: `uname -r; grep -c '^name' /proc/crypto; ls /dev/disk; cryptsetup --version; echo "@@R ok"`})
	t.Logf("output:\n%s", r.Output)
	if len(r.Lines("@@R ok")) != 1 {
		t.Fatalf("no ok line:\n%s", r.Console)
	}
}
