package adiantum

import (
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// TestGeneratedAsm checks that adiantum_amd64.s is what _asm produces.
func TestGeneratedAsm(t *testing.T) {
	testenv.Generated(t, "_asm", "adiantum_amd64.s", "internal/adiantum")
}
