//go:build !amd64 || purego

package gcm

// Without the assembly New always returns the generic implementation
// (crypto/cipher's GCM); the methods below are never reached.
const useAsm = false

func (g *GCM) initAsm(key []byte)                                 { panic("gcm: no assembly") }
func (g *GCM) seal(out, nonce, plaintext, ad []byte)              { panic("gcm: no assembly") }
func (g *GCM) open(out, nonce, ciphertext, ad []byte) bool        { panic("gcm: no assembly") }
func (g *GCM) sealDetached(out, tag, nonce, plaintext, ad []byte) { panic("gcm: no assembly") }
func (g *GCM) openDetached(out, nonce, ct, tag, ad []byte) bool   { panic("gcm: no assembly") }
