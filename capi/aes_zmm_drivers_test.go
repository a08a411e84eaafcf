package capi

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/aes"
)

const envNoAVX512Child = "BLKCRYPT_TEST_NOAVX512_CHILD"

// TestZMMCBCDrivers: where vaes-avx512 exists its CBC and fused ESSIV
// drivers are the best, unless internal/aes ranks vaes first on this CPU.
func TestZMMCBCDrivers(t *testing.T) {
	impls := aes.Impls()
	if !slices.Contains(impls, "vaes-avx512") {
		t.Skipf("no vaes-avx512 here (Impls %v)", impls)
	}
	best := impls[0]
	for name, want := range map[string]string{
		"cbc(aes)":               "cbc-aes-" + best,
		"essiv(cbc(aes),sha256)": "essiv-cbc-aes-sha256-" + best,
	} {
		a, err := Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		if a.Driver != want {
			t.Errorf("%s: best driver %s, want %s", name, a.Driver, want)
		}
	}
}

// TestNoAVX512Fallback forces the CPUs without AVX-512 through the
// setting x/sys/cpu reads (GODEBUG=cpu.avx512f=off) in a child process,
// which then checks that vaes is the best and runs the vector and
// equivalence suites over the drivers left.
func TestNoAVX512Fallback(t *testing.T) {
	if os.Getenv(envNoAVX512Child) != "" {
		if slices.Contains(aes.Impls(), "vaes-avx512") {
			t.Fatalf("GODEBUG=cpu.avx512f=off left vaes-avx512 in Impls %v", aes.Impls())
		}
		if !slices.Contains(aes.Impls(), "vaes") {
			t.Skipf("no vaes either (Impls %v)", aes.Impls())
		}
		for name, want := range map[string]string{
			"cbc(aes)":               "cbc-aes-vaes",
			"essiv(cbc(aes),sha256)": "essiv-cbc-aes-sha256-vaes",
		} {
			if a, err := Lookup(name); err != nil || a.Driver != want {
				t.Errorf("%s: best driver %v (%v), want %s", name, a, err, want)
			}
		}
		return
	}
	if !slices.Contains(aes.Impls(), "vaes-avx512") {
		t.Skipf("no vaes-avx512 here to switch off (Impls %v)", aes.Impls())
	}
	cmd := exec.Command(os.Args[0], "-test.count=1",
		"-test.run=^(TestNoAVX512Fallback|TestEveryDriverPassesVectors|FuzzCBC|FuzzESSIV)$")
	cmd.Env = append(os.Environ(), envNoAVX512Child+"=1", "GODEBUG=cpu.avx512f=off")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("child without AVX-512: %v\n%s", err, out)
	}
}
