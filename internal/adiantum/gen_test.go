package adiantum

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// TestGeneratedAsm checks that adiantum_amd64.s is what _asm produces.
func TestGeneratedAsm(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the generator")
	}
	goTool := testenv.Need(t, "go", "golang-go")
	want, err := os.ReadFile("adiantum_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "adiantum_amd64.s")
	cmd := exec.Command(goTool, "run", ".", "-out", out)
	cmd.Dir = "_asm"
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("generator failed: %v\n%s", err, msg)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("adiantum_amd64.s is stale: run go generate ./internal/adiantum")
	}
}
