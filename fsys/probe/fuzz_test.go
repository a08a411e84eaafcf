package probe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// FuzzIdentify probes arbitrary bytes: the answer is a type or
// ErrUnknown, never a panic or another error (bytes.Reader fails only at
// its end, which is "no signature there"). The seeds are hand-made
// signatures of several types, small enough to fuzz fast; TestSeeds
// checks that each is recognised.
func FuzzIdentify(f *testing.F) {
	for _, s := range seeds() {
		f.Add(s.b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := Identify(bytes.NewReader(b), int64(len(b)))
		switch {
		case err == nil && info.Type == "":
			t.Fatal("no error and no type")
		case err != nil && !errors.Is(err, ErrUnknown):
			t.Fatalf("unexpected error: %v", err)
		}
	})
}

type seed struct {
	typ string
	b   []byte
}

func seeds() []seed {
	le, be := binary.LittleEndian, binary.BigEndian
	var out []seed

	l1 := make([]byte, 4096)
	copy(l1, "LUKS\xba\xbe")
	be.PutUint16(l1[6:], 1)
	copy(l1[168:], "0f6c4a53-aaaa-bbbb-cccc-0123456789ab")
	out = append(out, seed{"crypto_LUKS", l1})
	l2 := bytes.Clone(l1)
	be.PutUint16(l2[6:], 2)
	copy(l2[24:], "label")
	out = append(out, seed{"crypto_LUKS", l2})

	ext := make([]byte, 4096)
	sb := ext[1024:]
	le.PutUint16(sb[56:], 0xEF53)
	le.PutUint32(sb[76:], 1)
	le.PutUint32(sb[92:], compatHasJournal)
	le.PutUint32(sb[96:], 0x40|incompatFiletype) // extents: ext4
	copy(sb[104:], "0123456789abcdef")
	copy(sb[120:], "root")
	out = append(out, seed{"ext4", ext})

	sw := make([]byte, 4096)
	le.PutUint32(sw[1024:], 1)
	copy(sw[1024+12:], "fedcba9876543210")
	copy(sw[1024+28:], "swap")
	copy(sw[4096-10:], "SWAPSPACE2")
	out = append(out, seed{"swap", sw})

	x := make([]byte, 512)
	copy(x, "XFSB")
	be.PutUint32(x[4:], 4096)
	copy(x[32:], "0123456789abcdef")
	copy(x[108:], "xfs")
	out = append(out, seed{"xfs", x})

	lv := make([]byte, 2048)
	copy(lv[512:], "LABELONE")
	le.PutUint64(lv[512+8:], 1)
	le.PutUint32(lv[512+20:], 32)
	copy(lv[512+24:], "LVM2 001")
	copy(lv[512+32:], "4OOcHenRK5hjiVDNL1MU29sg3LIqEcu1")
	out = append(out, seed{"LVM2_member", lv})

	bl := make([]byte, 1024)
	copy(bl, []byte{0xEB, 0x58, 0x90})
	copy(bl[3:], "-FVE-FS-")
	le.PutUint64(bl[176:], 512)
	copy(bl[512:], "-FVE-FS-")
	le.PutUint16(bl[512+10:], 2)
	out = append(out, seed{"BitLocker", bl})
	return out
}

// TestSeeds holds the fuzz seeds to the types they are made to be.
func TestSeeds(t *testing.T) {
	for _, s := range seeds() {
		info, err := Identify(bytes.NewReader(s.b), int64(len(s.b)))
		if err != nil || info.Type != s.typ {
			t.Errorf("seed %s: %+v %v", s.typ, info, err)
		}
	}
}
