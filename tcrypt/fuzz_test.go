package tcrypt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// FuzzParseFields: the decrypted-header parser never panics, accepts only
// what has a valid magic and CRCs, and what it accepts marshals back to a
// header that parses to the same fields. The seed corpus is in
// testdata/fuzz/FuzzParseFields (valid TrueCrypt and VeraCrypt headers of
// versions 1-5, hidden and system ones, and broken variants).
func FuzzParseFields(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, d []byte, vera bool) {
		h, err := ParseFields(d, vera)
		if err != nil {
			if h != nil {
				t.Fatal("fields returned with an error")
			}
			if !errors.Is(err, ErrNoHeader) && !errors.Is(err, ErrCorruptHeader) && !errors.Is(err, ErrInvalid) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if len(d) < HeaderLen || (string(d[:4]) != MagicTrue && string(d[:4]) != MagicVera) || (!vera && string(d[:4]) == MagicVera) {
			t.Fatalf("accepted %q", d[:min(len(d), 4)])
		}
		if h.MKOffset == 0 || h.SectorSize == 0 || !bytes.Equal(h.Keys[:], d[keysOff:HeaderLen]) {
			t.Fatalf("fields %+v", h)
		}
		again, err := ParseFields(h.Marshal(), vera)
		if err != nil {
			t.Fatalf("marshalled header does not parse: %v", err)
		}
		// Marshal drops the creation times and reserved bytes, so only
		// the header CRC may differ.
		again.HeaderCRC32 = h.HeaderCRC32
		if *again != *h {
			t.Fatalf("round trip changed the fields: %+v -> %+v", h, again)
		}
		// The geometry of any accepted header is computed without panics
		// and stays inside the device.
		for _, c := range []string{ModeXTS, ModeLRW, ModeTCW} {
			ch, _ := LookupChain("aes", c)
			for _, flags := range [][3]bool{{}, {true}, {false, true}} {
				hd := &Header{Fields: *h, Chain: ch, Hidden: flags[0], System: flags[1]}
				const dev = 1 << 20
				m, err := hd.Mapping(Geometry{dev, dev, false, -1})
				if err != nil {
					continue
				}
				if m.Offset+m.Size > dev/512 || m.Size == 0 || len(m.Layers) != 1 {
					t.Fatalf("mapping %+v outside a %d-sector device", m, dev/512)
				}
			}
		}
	})
}

// fuzzSeeds are the headers the committed corpus was made from.
func fuzzSeeds() [][]byte {
	var seeds [][]byte
	mk := func(magic string, ver, req uint16, hidden, vol, mk uint64, flags, ss uint32) *Fields {
		f := &Fields{Magic: magic, Version: ver, VersionTC: req, HiddenVolumeSize: hidden, VolumeSize: vol,
			MKOffset: mk, MKSize: vol, Flags: flags, SectorSize: ss}
		for i := range f.Keys {
			f.Keys[i] = byte(i * 7)
		}
		return f
	}
	for _, f := range []*Fields{
		mk(MagicTrue, 1, 0x0100, 0, 0, 0, 0, 0),
		mk(MagicTrue, 2, 0x0410, 16384, 0, 512, 0, 0),
		mk(MagicTrue, 3, 0x0500, 0, 18944, 512, 0, 512),
		mk(MagicTrue, 4, 0x0600, 0, 50176, 131072, 0, 512),
		mk(MagicTrue, 5, 0x0700, 19456, 19456, 157696, 0, 512),
		mk(MagicVera, 5, 0x010b, 0, 16777216, 34603008, FlagSystem, 512),
		mk(MagicVera, 5, 0x010b, 0, 1<<20, 131072, FlagNonSystem, 4096),
	} {
		d := f.Marshal()
		seeds = append(seeds, d)
		b := bytes.Clone(d)
		b[keysOff+3] ^= 0x40 // keys CRC mismatch
		seeds = append(seeds, b)
		b = bytes.Clone(d)
		binary.BigEndian.PutUint64(b[44:], ^uint64(0)) // huge offset, header CRC now wrong
		seeds = append(seeds, b)
	}
	seeds = append(seeds, make([]byte, HeaderLen), []byte("TRUE"), []byte("VERA\x00\x05"))
	return seeds
}
