package aes

import (
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// TestGeneratedAsm checks that aes_amd64.s is what the generator in _asm
// produces, so the committed assembly never drifts from its source.
func TestGeneratedAsm(t *testing.T) {
	testenv.Generated(t, "_asm", "aes_amd64.s", "internal/aes")
}
