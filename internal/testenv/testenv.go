// Package testenv decides what a test does when something it needs from
// outside the module is missing: a peer tool (cryptsetup, xz, openssl, …),
// the shared cryptsetup fixture images or the shared vectors.
//
// The rule, used by every test of the module:
//   - with CI set (any value but "" , "0" or "false"), a missing
//     prerequisite fails the test, so a CI run can never turn green by
//     skipping the tests that compare us with the outside world;
//   - outside CI the test is skipped, and the message says what is missing,
//     how to get it, and that CI would fail.
//
// Only missing prerequisites go through here. An error of our own code (a
// spec that does not parse, a header we cannot read) always fails.
package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// EnvFixtures and EnvVectors name the folders of the shared cryptsetup test
// images and of the shared vectors; unset, both are found beside the
// module root (../shared/fixtures/cryptsetup, ../shared/vectors).
const (
	EnvFixtures = "BLKCRYPT_FIXTURES"
	EnvVectors  = "BLKCRYPT_VECTORS"
)

// InCI reports whether the tests run under CI, where nothing may be skipped
// for a missing tool or fixture.
func InCI() bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv("CI"))) {
	case "", "0", "false", "no":
		return false
	}
	return true
}

// Missing reports a missing prerequisite: it fails the test under CI and
// skips it otherwise. It does not return.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("%s (CI is set: a missing prerequisite fails the test)", msg)
	}
	t.Skipf("%s; skipping outside CI (with CI=true this fails)", msg)
}

// sbinDirs are searched after PATH: cryptsetup and blkid live in /sbin,
// which an unprivileged user's PATH often lacks.
var sbinDirs = []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"}

// LookPath finds a program in PATH or the sbin folders.
func LookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range sbinDirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in PATH or %s", name, strings.Join(sbinDirs, ", "))
}

// Need returns the path of the program name, or reports it Missing with
// the Debian package pkg that provides it.
func Need(t testing.TB, name, pkg string) string {
	t.Helper()
	p, err := LookPath(name)
	if err != nil {
		Missing(t, "%s is needed by this test and was not found: apt-get install -y %s", name, pkg)
	}
	return p
}

// ModuleRoot returns the directory holding go.mod, searching up from the
// test's working directory (its package folder).
func ModuleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test directory")
		}
		dir = parent
	}
}

// FixturesDir returns $BLKCRYPT_FIXTURES, or ../shared/fixtures/cryptsetup
// beside the module root, reporting it Missing when it is not a directory.
func FixturesDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(EnvFixtures)
	if dir == "" {
		dir = filepath.Join(ModuleRoot(t), "..", "shared", "fixtures", "cryptsetup")
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		Missing(t, "cryptsetup fixture images not found at %s (set %s to shared/fixtures/cryptsetup)", dir, EnvFixtures)
	}
	return dir
}

// Fixture returns the path of one file of the fixtures folder (an archive
// such as "bitlk-images.tar.xz"), reporting it Missing when absent.
func Fixture(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(FixturesDir(t), name)
	if _, err := os.Stat(p); err != nil {
		Missing(t, "fixture %s not found in %s (%v)", name, filepath.Dir(p), err)
	}
	return p
}

// VectorsDir returns $BLKCRYPT_VECTORS, or the vectors folder beside the
// fixtures (shared/vectors), reporting it Missing when it is not there.
func VectorsDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(EnvVectors)
	if dir == "" {
		dir = filepath.Join(FixturesDir(t), "..", "..", "vectors")
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		Missing(t, "shared vectors not found at %s (set %s)", dir, EnvVectors)
	}
	return dir
}

// Generated checks that the committed file (in the test's package
// directory) is byte for byte what the generator program in genDir writes
// when run as `go run . -out FILE ARGS...`, so committed generated code
// never drifts from its source. pkg names the package for the message.
// It skips under -short: the generator may run for seconds.
func Generated(t testing.TB, genDir, file, pkg string, args ...string) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the generator")
	}
	goTool := Need(t, "go", "golang-go")
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), filepath.Base(file))
	cmd := exec.Command(goTool, append([]string{"run", ".", "-out", out}, args...)...)
	cmd.Dir = genDir
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("generator in %s failed: %v\n%s", genDir, err, msg)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: run go generate ./%s", file, pkg)
	}
}
