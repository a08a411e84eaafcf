package bitlk

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// fixtureDir returns cryptsetup's test images folder: $BLKCRYPT_FIXTURES,
// or ../shared/fixtures/cryptsetup beside the repository. The test skips,
// saying so, where it is absent.
func fixtureDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("BLKCRYPT_FIXTURES")
	if dir == "" {
		_, file, _, _ := runtime.Caller(0)
		dir = filepath.Join(filepath.Dir(file), "..", "..", "shared", "fixtures", "cryptsetup")
	}
	if _, err := os.Stat(filepath.Join(dir, "bitlk-images.tar.xz")); err != nil {
		t.Skipf("cryptsetup fixtures not found at %s (set BLKCRYPT_FIXTURES)", dir)
	}
	if _, err := exec.LookPath("xz"); err != nil {
		t.Skip("xz not installed")
	}
	return dir
}

// bitlkImages unpacks bitlk-images.tar.xz (sparse files: fast and small)
// and returns its folder.
func bitlkImages(t testing.TB) string {
	t.Helper()
	src := filepath.Join(fixtureDir(t), "bitlk-images.tar.xz")
	dst := t.TempDir()
	if out, err := exec.Command("tar", "-xJf", src, "-C", dst).CombinedOutput(); err != nil {
		t.Fatalf("untar: %v %s", err, out)
	}
	return filepath.Join(dst, "bitlk-images")
}

// imageConf is one section of the archive's images.conf (upstream's table
// of expectations): CIPHER, GUID, PW, RP, SHA256SUM, *_VMK_GUID, ...
type imageConf map[string]string

func readImagesConf(t testing.TB, dir string) map[string]imageConf {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "images.conf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string]imageConf{}
	var cur imageConf
	s := bufio.NewScanner(f)
	for s.Scan() {
		l := strings.TrimSpace(s.Text())
		if strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]") {
			cur = imageConf{}
			m[l[1:len(l)-1]+".img"] = cur
		} else if k, v, ok := strings.Cut(l, "="); ok && cur != nil {
			cur[k] = v
		}
	}
	return m
}

func sortedNames(m map[string]imageConf) []string {
	var n []string
	for k := range m {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}
