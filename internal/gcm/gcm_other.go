//go:build !amd64 || purego

package gcm

// Without the assembly New always returns the generic implementation
// (crypto/cipher's GCM); the methods below are never reached.
const useAsm = false

func (g *GCM) initAsm(key []byte)                            { panic("gcm: no assembly") }
func (g *GCM) ghash(acc *[16]byte, data []byte)              { panic("gcm: no assembly") }
func (g *GCM) encBlocks(ctr, acc *[16]byte, dst, src []byte) { panic("gcm: no assembly") }
func (g *GCM) decBlocks(ctr, acc *[16]byte, dst, src []byte) { panic("gcm: no assembly") }
