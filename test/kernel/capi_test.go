//go:build linux

package kernel

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// goBuild builds a static Linux/amd64 binary of a package of this module
// (CGO_ENABLED=0, so it runs in the busybox initramfs). test builds the
// package's test binary instead (go test -c).
func goBuild(t *testing.T, pkg, out string, test bool) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	args := []string{"build", "-o", out, pkg}
	if test {
		args = []string{"test", "-c", "-o", out, pkg}
	}
	cmd := exec.Command(goBin, args...)
	// -race (in GOFLAGS) needs cgo; the guest binaries are built without.
	var flags []string
	for _, f := range strings.Fields(os.Getenv("GOFLAGS")) {
		if f != "-race" {
			flags = append(flags, f)
		}
	}
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GOFLAGS="+strings.Join(flags, " "))
	if o, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, o)
	}
}

// kcheckAlgs are the algorithms test (c) compares on kcheckCases random
// cases each; kcheckExtra come along with fewer cases because the guest
// has them loaded anyway.
var (
	kcheckAlgs  = []string{"essiv(cbc(aes),sha256)", "xts(aes)", "cbc(aes)"}
	kcheckExtra = []string{"xts(serpent)", "cbc(twofish)", "lrw(aes)", "ctr(aes)", "adiantum(xchacha12,aes)"}
)

const (
	kcheckCases      = 1000
	kcheckExtraCases = 200
)

// TestKernelCryptoAPI boots once for test (c) and the AF_ALG engine's
// tests: kcheck compares the kernel's templates through AF_ALG with every
// capi driver of the same name on random keys, IVs and lengths; then the
// sector package's test binary runs its AF_ALG tests and benchmark against
// the guest kernel.
func TestKernelCryptoAPI(t *testing.T) {
	k := need(t)
	dir := t.TempDir()
	kcheck := filepath.Join(dir, "kcheck")
	goBuild(t, "./guest/kcheck", kcheck, false)
	sectorTest := filepath.Join(dir, "sector.test")
	goBuild(t, "../../sector", sectorTest, true)
	cli := filepath.Join(dir, "blkcrypt")
	goBuild(t, "../../cmd/blkcrypt", cli, false)
	vectors, err := os.ReadFile("../../sector/testdata/cryptsetup_sector_iv.json")
	if err != nil {
		t.Fatal(err)
	}
	// A new seed each run, logged so that a failure can be replayed.
	seed := uint64(time.Now().UnixNano())
	t.Logf("kcheck seed %d", seed)
	script := fmt.Sprintf(`echo "@@K-BEGIN"
/kt/kcheck -n %d -seed %d -algs '%s'
echo "@@X $?"
/kt/kcheck -n %d -seed %d -algs '%s'
echo "@@X $?"
echo "@@K-END"
cd /kt/sector && BLKCRYPT_REQUIRE_AFALG=1 /kt/sector.test -test.run AFALG -test.v -test.bench AFALG -test.benchtime 100ms 2>&1
echo "@@Y $?"
/kt/blkcrypt benchmark --cipher aes-xts-plain64 --sec 0.05 2>&1 | sed 's/^/@@B /'
`, kcheckCases, seed, strings.Join(kcheckAlgs, ";"), kcheckExtraCases, seed+1, strings.Join(kcheckExtra, ";"))
	r := run(t, k, Boot{
		Executables: map[string]string{"/kt/kcheck": kcheck, "/kt/sector.test": sectorTest, "/kt/blkcrypt": cli},
		Files:       map[string][]byte{"/kt/sector/testdata/cryptsetup_sector_iv.json": vectors},
		Script:      script,
		Timeout:     10 * time.Minute,
	})
	t.Run("templates", func(t *testing.T) { checkKcheck(t, r) })
	t.Run("afalg-engine", func(t *testing.T) { checkEngine(t, r) })
	t.Run("benchmark-verb", func(t *testing.T) {
		// blkcrypt benchmark reports the AF_ALG row and break-even where
		// the kernel has AF_ALG.
		b := r.Lines("@@B ")
		found := 0
		for _, l := range b {
			if strings.Contains(l, "AF_ALG") {
				t.Logf("%s", l)
			}
			if strings.Contains(l, "# engine: AF_ALG aes-xts-plain64 break-even") || strings.Contains(l, "kernel vs in-process") && !strings.Contains(l, "N/A") {
				found++
			}
		}
		if found < 3 {
			t.Errorf("blkcrypt benchmark in the guest does not show the AF_ALG rows:\n%s", strings.Join(b, "\n"))
		}
	})
}

// checkKcheck is the verdict of test (c).
func checkKcheck(t *testing.T, r *Result) {
	for _, l := range r.Lines("@@E ") {
		t.Errorf("guest: %s", l)
	}
	for _, l := range r.Lines("@@S ") {
		t.Logf("guest: %s", l)
	}
	compared := map[string]int{}
	for _, l := range r.Lines("@@C ") {
		t.Logf("%s", l)
		f := strings.Fields(l)
		if len(f) < 3 || !strings.HasPrefix(f[2], "cases=") {
			t.Errorf("kcheck: %s", l)
			continue
		}
		if !strings.Contains(l, " mismatches=0 ") {
			t.Errorf("kernel and blkcrypt disagree: %s", l)
			continue
		}
		n, _ := strconv.Atoi(strings.TrimPrefix(f[2], "cases="))
		compared[f[0]] = max(compared[f[0]], n)
	}
	for _, a := range kcheckAlgs {
		if compared[a] < kcheckCases {
			t.Errorf("%s: no capi driver was compared with the kernel on %d cases", a, kcheckCases)
		}
	}
	for _, a := range kcheckExtra {
		if compared[a] == 0 {
			t.Errorf("%s: not compared with the kernel", a)
		}
	}
	if x := r.Lines("@@X "); len(x) != 2 || x[0] != "0" || x[1] != "0" {
		t.Errorf("kcheck exit statuses %v", x)
	}
	if t.Failed() {
		t.Logf("guest output:\n%s", r.Output)
	}
}

// checkEngine reads the sector test binary's verbose output: every AF_ALG
// test must pass (BLKCRYPT_REQUIRE_AFALG=1 turns a skip into a failure).
func checkEngine(t *testing.T, r *Result) {
	out := r.Output
	if i := strings.Index(out, "@@K-END\n"); i >= 0 {
		out = out[i+len("@@K-END\n"):]
	}
	if i := strings.Index(out, "@@Y "); i >= 0 {
		out = out[:i]
	}
	passed := 0
	for _, l := range strings.Split(out, "\n") {
		tl := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(tl, "--- PASS: TestAFALG"):
			passed++
		case strings.HasPrefix(tl, "--- FAIL"), strings.HasPrefix(tl, "--- SKIP"):
			t.Errorf("guest: %s", tl)
		case strings.HasPrefix(tl, "BenchmarkAFALG"), strings.Contains(tl, "break-even"), strings.Contains(tl, "AF_ALG present"),
			strings.Contains(tl, "batches identical"), strings.Contains(tl, "bytes: in-process"):
			t.Logf("%s", tl)
		}
	}
	if y := r.Lines("@@Y "); len(y) != 1 || y[0] != "0" {
		t.Errorf("sector.test exit status %v", y)
	}
	if passed < 7 {
		t.Errorf("%d AF_ALG tests passed in the guest, want 7", passed)
	}
	if t.Failed() {
		t.Logf("guest output:\n%s", out)
	}
}
