package adiantum

import (
	"bytes"
	"testing"
)

// FuzzImplsAgree checks every implementation against the generic one on
// arbitrary keys, tweaks and messages, for both round counts.
func FuzzImplsAgree(f *testing.F) {
	f.Add(make([]byte, KeySize), make([]byte, TweakSize), make([]byte, 16), false)
	f.Add(bytes.Repeat([]byte{0xff}, KeySize), bytes.Repeat([]byte{0xff}, TweakSize), bytes.Repeat([]byte{0xff}, 4096), true)
	f.Add(make([]byte, KeySize), make([]byte, TweakSize), make([]byte, 1041), false)
	f.Fuzz(func(t *testing.T, key, tweak, msg []byte, twenty bool) {
		if len(key) != KeySize || len(tweak) != TweakSize || len(msg) < MinLen {
			return
		}
		rounds := 12
		if twenty {
			rounds = 20
		}
		ref := mustNew(t, "generic", rounds, key)
		want := make([]byte, len(msg))
		ref.Encrypt(want, msg, tweak)
		back := make([]byte, len(msg))
		ref.Decrypt(back, want, tweak)
		if !bytes.Equal(back, msg) {
			t.Fatal("generic decrypt does not invert encrypt")
		}
		for _, impl := range Impls() {
			c := mustNew(t, impl, rounds, key)
			got := make([]byte, len(msg))
			c.Encrypt(got, msg, tweak)
			if !bytes.Equal(got, want) {
				t.Fatalf("%s: encrypt differs from generic", impl)
			}
			c.Decrypt(got, want, tweak)
			if !bytes.Equal(got, msg) {
				t.Fatalf("%s: decrypt differs from generic", impl)
			}
		}
	})
}
