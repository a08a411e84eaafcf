package sector

import (
	"testing"
)

// FuzzSpec: any string either parses, prints back to a spec that parses to
// the same thing, and builds (or refuses) a cipher without panicking — or
// is refused with an error.
func FuzzSpec(f *testing.F) {
	for _, s := range []string{"aes-xts-plain64", "aes:64-cbc-lmk", "capi:xts(aes)-plain64", "aes-cbc-essiv:sha256",
		"twofish-lrw-benbi", "aes-cbc-elephant", "capi:cbc(aes)-essiv:sha256", "aes", "serpent-cbc-tcw", "aes-cbc-random", "capi:", "a-b-c:d:e"} {
		f.Add(s, uint8(32), uint16(512))
	}
	f.Fuzz(func(t *testing.T, spec string, keyLen uint8, ss uint16) {
		s, err := ParseSpec(spec)
		if err != nil {
			return
		}
		s2, err := ParseSpec(s.String())
		if err != nil || s2.String() != s.String() || s2.CAPI != s.CAPI || s2.KeyCount != s.KeyCount {
			t.Fatalf("%q -> %q does not reparse the same (%v)", spec, s.String(), err)
		}
		c, err := NewFromSpec(s, make([]byte, int(keyLen)*8), Options{SectorSize: int(ss)})
		if err != nil {
			return
		}
		buf := make([]byte, c.SectorSize()*2)
		if err := c.EncryptSectors(buf, buf, 0); err != nil {
			t.Fatalf("%s: %v", spec, err)
		}
		if err := c.DecryptSectors(buf, buf, 0); err != nil {
			t.Fatalf("%s: %v", spec, err)
		}
		for _, b := range buf {
			if b != 0 {
				t.Fatalf("%s: round trip lost data", spec)
			}
		}
	})
}
