package gcm

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// TestImplSelection: New picks vaes-avx512 exactly when the CPU checks
// pass. With BLKCRYPT_TEST_GCM_IMPL set (scripts or TestForcedFallback's
// child) the implementation must be that one, so that a feature check
// gone wrong cannot pass every test by testing generic twice.
func TestImplSelection(t *testing.T) {
	g, err := New(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	want := "generic"
	if useAsm {
		want = "vaes-avx512"
	}
	if g.Impl() != want {
		t.Fatalf("New: %s, want %s", g.Impl(), want)
	}
	if env := os.Getenv("BLKCRYPT_TEST_GCM_IMPL"); env != "" && g.Impl() != env {
		t.Fatalf("GODEBUG=%q: New: %s, want %s", os.Getenv("GODEBUG"), g.Impl(), env)
	}
	t.Logf("implementation: %s", g.Impl())
}

// TestForcedFallback reruns the suite with AVX-512 switched off through
// GODEBUG (golang.org/x/sys/cpu honours cpu.<feature>=off): New must fall
// back to generic, which must still pass.
func TestForcedFallback(t *testing.T) {
	if !useAsm {
		t.Skip("no vaes-avx512 here to switch off")
	}
	if os.Getenv("BLKCRYPT_TEST_GCM_IMPL") != "" {
		t.Skip("already the child")
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^(TestImplSelection|TestSpecVectors|TestKernelVectors|TestVsStdlib)$", "-test.count=1")
	cmd.Env = append(os.Environ(), "GODEBUG=cpu.avx512f=off", "BLKCRYPT_TEST_GCM_IMPL=generic")
	out, err := cmd.CombinedOutput()
	if errors.Is(err, syscall.ENOEXEC) {
		t.Skipf("cannot re-execute the test binary here (%v)", err)
	}
	if err != nil {
		t.Errorf("GODEBUG=cpu.avx512f=off: %v\n%s", err, out)
	}
}
