package bitlk

import (
	"bytes"
	"testing"
)

func TestRecoveryKey(t *testing.T) {
	k, ok := RecoveryKey([]byte("235818-357951-253979-013365-241120-245575-342914-591910"))
	if !ok {
		t.Fatal("valid recovery password refused")
	}
	// 235818/11 = 21438 = 0x53be, little-endian.
	if k[0] != 0xbe || k[1] != 0x53 {
		t.Fatalf("first group encodes as %x", k[:2])
	}
	if k2, ok := RecoveryKey([]byte("235818-357951-253979-013365-241120-245575-342914-591910\n")); !ok || k2 != k {
		t.Fatal("trailing newline not ignored")
	}
	for _, bad := range []string{
		"",
		"235818-357951-253979-013365-241120-245575-342914-59191",   // short
		"235818-357951-253979-013365-241120-245575-342914-5919100", // long
		"235818 357951-253979-013365-241120-245575-342914-591910",  // separator
		"235819-357951-253979-013365-241120-245575-342914-591910",  // not /11
		"23581a-357951-253979-013365-241120-245575-342914-591910",  // digit
		"+23581-357951-253979-013365-241120-245575-342914-591910",  // sign
		"720896-357951-253979-013365-241120-245575-342914-591910",  // 65536*11
		"235818-357951-253979-013365-241120-245575-342914-591910\n\n",
	} {
		if _, ok := RecoveryKey([]byte(bad)); ok {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestPasswordHashUTF16(t *testing.T) {
	// "£" is U+00A3: UTF-16LE a3 00, so the hash differs from that of the
	// UTF-8 bytes c2 a3 taken as two characters.
	a, ok := passwordHash([]byte("anaconda\u00a3"))
	if !ok {
		t.Fatal("UTF-8 refused")
	}
	b, _ := passwordHash([]byte("anaconda\u00c2\u00a3"))
	if a == b {
		t.Fatal("non-ASCII characters hashed byte by byte")
	}
	// Characters outside the BMP become surrogate pairs.
	c, _ := passwordHash([]byte("\U0001F600"))
	d, _ := passwordHash([]byte("\uFFFD"))
	if c == d {
		t.Fatal("astral character mangled")
	}
	// A NUL ends the password, as the UTF-16 string's length does.
	e, _ := passwordHash([]byte("ab\x00cd"))
	f, _ := passwordHash([]byte("ab"))
	if e != f {
		t.Fatal("NUL does not end the password")
	}
	if _, ok := passwordHash([]byte{0xff, 0xfe}); ok {
		t.Fatal("invalid UTF-8 accepted")
	}
}

func TestStretchShape(t *testing.T) {
	var h [32]byte
	var s [16]byte
	x := stretch(&h, &s)
	s[0] = 1
	y := stretch(&h, &s)
	if bytes.Equal(x[:], y[:]) {
		t.Fatal("salt has no effect")
	}
}

func BenchmarkStretch(b *testing.B) {
	var h [32]byte
	var s [16]byte
	for i := 0; i < b.N; i++ {
		stretch(&h, &s)
	}
}
