package luks2

import (
	"bytes"
	"context"
)

// derivedKeys carries the keys a fresh run's init derived (the old key)
// or made (the new one), by digest ID, to the loadEngine right after it.
// Without it a reencryption derived the old key twice and the new key
// once more after storing it: four KDF runs where cryptsetup has two,
// seconds each with argon2id (an encryption or decryption one more). It travels in the context so that the
// init and load signatures, which other entry points share, stay as
// they are.
type derivedKeys map[int][]byte

type derivedKeysKey struct{}

// withDerivedKeys returns ctx carrying an empty derivedKeys; the caller
// wipes it once loaded.
func withDerivedKeys(ctx context.Context) (context.Context, derivedKeys) {
	k := derivedKeys{}
	return context.WithValue(ctx, derivedKeysKey{}, k), k
}

func (k derivedKeys) wipe() {
	for id, b := range k {
		clear(b)
		delete(k, id)
	}
}

// rememberKey keeps a copy of key, verified against digest id, when ctx
// carries a derivedKeys.
func rememberKey(ctx context.Context, id int, key []byte) {
	if k, ok := ctx.Value(derivedKeysKey{}).(derivedKeys); ok {
		k[id] = bytes.Clone(key)
	}
}

// derivedKey is a copy of the remembered key of digest id, or nil.
func derivedKey(ctx context.Context, id int) []byte {
	if k, ok := ctx.Value(derivedKeysKey{}).(derivedKeys); ok && k[id] != nil {
		return bytes.Clone(k[id])
	}
	return nil
}
