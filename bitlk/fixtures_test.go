package bitlk

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// bitlkImages unpacks cryptsetup's bitlk-images.tar.xz (sparse files: fast
// and small) and returns its folder. A missing archive or xz fails under CI
// and skips otherwise (internal/testenv).
func bitlkImages(t testing.TB) string {
	t.Helper()
	src := testenv.Fixture(t, "bitlk-images.tar.xz")
	testenv.Need(t, "xz", "xz-utils")
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
