package blkcrypt_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/integrity"
	"github.com/blkcrypt/blkcrypt/internal/powercut"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// integrityCase is TestRegistry's dm-integrity volume: formatted here,
// its dump judged by integritysetup dump (the kernel judges the data
// layout in test/kernel).
func integrityCase(t *testing.T, dir string) *registryCase {
	t.Helper()
	isetup := testenv.Need(t, "integritysetup", "cryptsetup-bin")
	p := filepath.Join(dir, "integrity.img")
	newImage(t, p, 1<<20)
	if err := blkcrypt.FormatIntegrity(context.Background(), p, blkcrypt.FormatIntegrityOptions{SectorSize: 4096, InterleaveSectors: 256}); err != nil {
		t.Fatal(err)
	}
	zeros := func(t *testing.T, v *blkcrypt.Volume) {
		b, err := io.ReadAll(io.NewSectionReader(v, 0, v.Size()))
		if err != nil || len(b) == 0 || !bytes.Equal(b, make([]byte, len(b))) {
			t.Errorf("a new integrity volume reads %d bytes, zero %v: %v", len(b), bytes.Equal(b, make([]byte, len(b))), err)
		}
	}
	return &registryCase{path: p, check: zeros, csDump: []string{isetup, "dump", p}, keyDump: []string{isetup, "dump", p}}
}

func newImage(t *testing.T, p string, size int64) {
	t.Helper()
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, size); err != nil {
		t.Fatal(err)
	}
}

// TestStandaloneIntegrity: standalone dm-integrity volumes through the
// registry. FormatIntegrity with integritysetup's algorithms, sector
// sizes, journal options and modes makes volumes whose dump integritysetup
// prints exactly as DumpVolume does; Open detects them (blkid's
// DM_integrity), writes and reads them back in every mode; a flipped data
// byte is an *IntegrityError naming its sector while the other sectors
// read; wrong keys and options are refused.
func TestStandaloneIntegrity(t *testing.T) {
	isetup := testenv.Need(t, "integritysetup", "cryptsetup-bin")
	ctx := context.Background()
	dir := t.TempDir()
	key := bytes.Repeat([]byte("k3y!"), 8)
	jkey := bytes.Repeat([]byte("jmac"), 8)
	ckey := bytes.Repeat([]byte("ctr!"), 8)
	cases := []struct {
		name string
		f    blkcrypt.FormatIntegrityOptions
		o    blkcrypt.IntegrityOptions
	}{
		{"crc32c-512", blkcrypt.FormatIntegrityOptions{}, blkcrypt.IntegrityOptions{}},
		{"crc32-1k-bitmap", blkcrypt.FormatIntegrityOptions{Algorithm: "crc32", SectorSize: 1024, InterleaveSectors: 64},
			blkcrypt.IntegrityOptions{Algorithm: "crc32", Mode: integrity.ModeBitmap}},
		{"sha1-2k-direct", blkcrypt.FormatIntegrityOptions{Algorithm: "sha1", SectorSize: 2048, TagSize: 8},
			blkcrypt.IntegrityOptions{Algorithm: "sha1", Mode: integrity.ModeDirect, TagSize: 8}},
		{"sha256-4k", blkcrypt.FormatIntegrityOptions{Algorithm: "sha256", SectorSize: 4096, InterleaveSectors: 128, JournalSize: 64 << 10},
			blkcrypt.IntegrityOptions{Algorithm: "sha256", SectorSize: 4096}},
		{"hmac-sha256-jmac", blkcrypt.FormatIntegrityOptions{Algorithm: "hmac-sha256", Key: key, JournalIntegrity: "hmac-sha256", JournalIntegrityKey: jkey},
			blkcrypt.IntegrityOptions{Algorithm: "hmac-sha256", Key: key, JournalIntegrity: "hmac-sha256", JournalIntegrityKey: jkey}},
		{"crc32c-jcrypt", blkcrypt.FormatIntegrityOptions{SectorSize: 4096, JournalCrypt: "ctr-aes", JournalCryptKey: ckey},
			blkcrypt.IntegrityOptions{JournalCrypt: "ctr-aes", JournalCryptKey: ckey}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, c.name+".img")
			newImage(t, p, 2<<20)
			if err := blkcrypt.FormatIntegrity(ctx, p, c.f); err != nil {
				t.Fatal(err)
			}
			ref, err := exec.Command(isetup, "dump", p).Output()
			if err != nil {
				t.Fatalf("integritysetup dump: %v", err)
			}
			var mine bytes.Buffer
			if err := blkcrypt.DumpVolume(ctx, p, &mine, blkcrypt.DumpVolumeOptions{}); err != nil {
				t.Fatal(err)
			}
			if mine.String() != string(ref) {
				t.Errorf("dump differs:\n%s--- integritysetup:\n%s", mine.String(), ref)
			}

			v, err := blkcrypt.Open(ctx, p, blkcrypt.OpenOptions{Integrity: c.o}) // detected
			if err != nil {
				t.Fatal(err)
			}
			if v.Type() != blkcrypt.TypeIntegrity || v.Cipher() != nil || v.ReadOnly() {
				t.Errorf("type %q, cipher %v, read-only %v", v.Type(), v.Cipher(), v.ReadOnly())
			}
			if sb, ok := v.IntegrityVolume(); !ok || sb.SectorSize() != v.SectorSize() || sb.ProvidedDataSectors*512 != uint64(v.Size()) {
				t.Errorf("IntegrityVolume: %+v, %v; sector size %d, size %d", sb, ok, v.SectorSize(), v.Size())
			}
			ss := int64(v.SectorSize())
			want := make([]byte, v.Size())
			for k := range want {
				want[k] = byte(k*7 + i)
			}
			// Unaligned, so that the partial sectors are read, modified
			// and written.
			if _, err := v.WriteAt(want[100:len(want)-100], 100); err != nil {
				t.Fatal(err)
			}
			clear(want[:100])
			clear(want[len(want)-100:])
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
			v, err = blkcrypt.Open(ctx, p, blkcrypt.OpenOptions{Type: blkcrypt.TypeIntegrity, ReadOnly: true, Integrity: c.o})
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, v.Size())
			if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("read back: %v, equal %v", err, bytes.Equal(got, want))
			}
			v.Close()

			// A flipped data byte of the third sector.
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			sb, err := integrity.ReadSuperblock(f)
			if err != nil {
				t.Fatal(err)
			}
			g, err := sb.Geometry()
			if err != nil {
				t.Fatal(err)
			}
			bad := 2 * uint64(ss/512)
			b := []byte{0}
			off := int64(g.DataSector(bad))<<9 + 17
			f.ReadAt(b, off)
			b[0] ^= 0x20
			if _, err := f.WriteAt(b, off); err != nil {
				t.Fatal(err)
			}
			f.Close()
			v, err = blkcrypt.Open(ctx, p, blkcrypt.OpenOptions{Type: blkcrypt.TypeIntegrity, ReadOnly: true, Integrity: c.o})
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			_, err = v.ReadAt(got, 0)
			var ie *blkcrypt.IntegrityError
			if !errors.Is(err, blkcrypt.ErrIntegrity) || !errors.As(err, &ie) || ie.Sector != bad || ie.Offset != int64(bad)*512 {
				t.Errorf("tampered read: %v (%+v), want sector %d", err, ie, bad)
			}
			one := make([]byte, ss)
			if _, err := v.ReadAt(one, int64(bad)*512); !errors.Is(err, blkcrypt.ErrIntegrity) {
				t.Errorf("tampered sector alone: %v", err)
			}
			for _, s := range []int64{0, 1, 3, v.Size()/ss - 1} {
				if _, err := v.ReadAt(one, s*ss); err != nil || !bytes.Equal(one, want[s*ss:][:ss]) {
					t.Errorf("sector %d beside the tampered one: %v", s, err)
				}
			}
		})
	}

	// Refusals: a wrong HMAC key reads as tampering everywhere; a wrong
	// journal MAC key, a wrong tag or sector size and a missing key do not
	// open; a non-empty device is not formatted without Force.
	hp := filepath.Join(dir, "hmac-sha256-jmac.img")
	good := cases[4].o
	wrong := good
	wrong.Key = bytes.Repeat([]byte("nope"), 8)
	if v, err := blkcrypt.Open(ctx, hp, blkcrypt.OpenOptions{ReadOnly: true, Integrity: wrong}); err != nil {
		t.Errorf("wrong tag key: open: %v", err)
	} else {
		if _, err := v.ReadAt(make([]byte, 512), 0); !errors.Is(err, blkcrypt.ErrIntegrity) {
			t.Errorf("wrong tag key: read %v, want ErrIntegrity", err)
		}
		v.Close()
	}
	for name, o := range map[string]blkcrypt.IntegrityOptions{
		"wrong journal key": {Algorithm: good.Algorithm, Key: good.Key, JournalIntegrity: good.JournalIntegrity, JournalIntegrityKey: wrong.Key},
		"no journal MAC":    {Algorithm: good.Algorithm, Key: good.Key},
		"no key":            {Algorithm: good.Algorithm, JournalIntegrity: good.JournalIntegrity, JournalIntegrityKey: good.JournalIntegrityKey},
		"tag size":          {Algorithm: good.Algorithm, Key: good.Key, JournalIntegrity: good.JournalIntegrity, JournalIntegrityKey: good.JournalIntegrityKey, TagSize: 4},
		"sector size":       {Algorithm: good.Algorithm, Key: good.Key, JournalIntegrity: good.JournalIntegrity, JournalIntegrityKey: good.JournalIntegrityKey, SectorSize: 4096},
		"unknown algorithm": {Algorithm: "md5"},
	} {
		if v, err := blkcrypt.Open(ctx, hp, blkcrypt.OpenOptions{ReadOnly: true, Integrity: o}); err == nil {
			v.Close()
			t.Errorf("%s: opened", name)
		}
	}
	if err := blkcrypt.FormatIntegrity(ctx, hp, blkcrypt.FormatIntegrityOptions{}); !errors.Is(err, blkcrypt.ErrInvalidOptions) || !errors.Is(err, integrity.ErrNotEmpty) {
		t.Errorf("format over a volume without Force: %v", err)
	}
	if _, err := blkcrypt.Open(ctx, filepath.Join(dir, "crc32c-512.img"), blkcrypt.OpenOptions{Type: "luks2", Passphrase: []byte("x")}); err == nil {
		t.Error("an integrity volume opened as LUKS2")
	}
	zp := filepath.Join(dir, "zeros.img")
	newImage(t, zp, 1<<20)
	if _, err := blkcrypt.Open(ctx, zp, blkcrypt.OpenOptions{Type: blkcrypt.TypeIntegrity}); !errors.Is(err, blkcrypt.ErrNoHeader) {
		t.Errorf("zeros as integrity: %v, want ErrNoHeader", err)
	}

	// --no-wipe: the superblock and journal only; the blocks read as
	// mismatches until written, as after integritysetup format --no-wipe.
	np := filepath.Join(dir, "nowipe.img")
	newImage(t, np, 1<<20)
	if err := blkcrypt.FormatIntegrity(ctx, np, blkcrypt.FormatIntegrityOptions{NoWipe: true}); err != nil {
		t.Fatal(err)
	}
	v, err := blkcrypt.Open(ctx, np, blkcrypt.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if _, err := v.ReadAt(make([]byte, 512), 0); !errors.Is(err, blkcrypt.ErrIntegrity) {
		t.Errorf("unwritten block after NoWipe: %v, want ErrIntegrity", err)
	}
	if _, err := v.WriteAt(bytes.Repeat([]byte{1}, 512), 0); err != nil {
		t.Fatal(err)
	}
	if b := make([]byte, 512); func() error { _, err := v.ReadAt(b, 0); return err }() != nil || b[511] != 1 {
		t.Error("a written block after NoWipe does not read back")
	}
}

// FuzzOpenIntegrity: any device is detected, opened read-only as a
// dm-integrity volume and read through the registry without a panic or a
// hang: an error, or data with every sector checked.
func FuzzOpenIntegrity(f *testing.F) {
	dir := f.TempDir()
	for i, o := range []blkcrypt.FormatIntegrityOptions{{InterleaveSectors: 8}, {Algorithm: "sha1", SectorSize: 1024, InterleaveSectors: 16, JournalSize: 4096}} {
		p := filepath.Join(dir, string(rune('a'+i)))
		if err := os.WriteFile(p, make([]byte, 256<<10), 0o600); err != nil {
			f.Fatal(err)
		}
		if err := blkcrypt.FormatIntegrity(context.Background(), p, o); err != nil {
			f.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, o.Algorithm)
	}
	f.Fuzz(func(t *testing.T, dev []byte, alg string) {
		if len(dev) > 1<<20 {
			return
		}
		ctx := context.Background()
		typ, _ := blkcrypt.DetectType(ctx, bytes.NewReader(dev))
		v, err := blkcrypt.OpenDevice(ctx, bytes.NewReader(dev), blkcrypt.OpenOptions{Type: blkcrypt.TypeIntegrity, Integrity: blkcrypt.IntegrityOptions{Algorithm: alg}})
		if err != nil {
			return
		}
		defer v.Close()
		if typ != blkcrypt.TypeIntegrity {
			t.Errorf("opened as integrity, detected as %q", typ)
		}
		if v.Size() > int64(len(dev)) || !v.ReadOnly() {
			t.Fatalf("a %d-byte volume on a %d-byte device, read-only %v", v.Size(), len(dev), v.ReadOnly())
		}
		buf := make([]byte, v.SectorSize())
		for off := int64(0); off < v.Size(); off += int64(len(buf)) {
			if _, err := v.ReadAt(buf, off); err != nil && !errors.Is(err, blkcrypt.ErrIntegrity) {
				return
			}
		}
	})
}

// TestStandaloneIntegrityPowerCut: a write through the registry's
// integrity volume, cut at every point (powercut images), leaves every
// sector verifying and old or new after the next writable open (journal
// replay, or in bitmap mode the dirty regions' tags recomputed), and the
// journal mode's whole write old or new.
func TestStandaloneIntegrityPowerCut(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []integrity.Mode{integrity.ModeJournal, integrity.ModeBitmap} {
		p := filepath.Join(t.TempDir(), "v.img")
		newImage(t, p, 1<<20)
		if err := blkcrypt.FormatIntegrity(ctx, p, blkcrypt.FormatIntegrityOptions{Algorithm: "sha256", InterleaveSectors: 64}); err != nil {
			t.Fatal(err)
		}
		base, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		o := blkcrypt.OpenOptions{Type: blkcrypt.TypeIntegrity, Integrity: blkcrypt.IntegrityOptions{Algorithm: "sha256", Mode: mode}}
		const first, n, ss = 50, 40, 512 // crosses an area boundary
		dev := powercut.New(base)
		v, err := blkcrypt.OpenDevice(ctx, dev, o)
		if err != nil {
			t.Fatal(err)
		}
		size := v.Size()
		before := dev.Ops()
		newData := bytes.Repeat([]byte("new!"), n*ss/4)
		if _, err := v.WriteAt(newData, first*ss); err != nil {
			t.Fatal(err)
		}
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}
		sawOld, sawNew := 0, 0
		for k := before; k <= dev.Ops(); k++ {
			for i, im := range dev.CutAfter(k).Images(uint64(k), 2) {
				v2, err := blkcrypt.OpenDevice(ctx, powercut.New(im.Bytes()), o)
				if err != nil {
					t.Fatalf("mode %d, cut after op %d (image %d): open: %v", mode, k, i, err)
				}
				got := make([]byte, size)
				if _, err := v2.ReadAt(got, 0); err != nil {
					t.Fatalf("mode %d, cut after op %d (image %d): read: %v", mode, k, i, err)
				}
				v2.Close()
				for s := int64(0); s < size/ss; s++ {
					sec := got[s*ss : (s+1)*ss]
					var nw []byte
					if s >= first && s < first+n {
						nw = newData[(s-first)*ss : (s-first+1)*ss]
					}
					if !bytes.Equal(sec, make([]byte, ss)) && (nw == nil || !bytes.Equal(sec, nw)) {
						t.Fatalf("mode %d, cut after op %d (image %d): sector %d is neither old nor new", mode, k, i, s)
					}
				}
				switch {
				case bytes.Equal(got[first*ss:(first+n)*ss], newData):
					sawNew++
				case bytes.Equal(got[first*ss:(first+n)*ss], make([]byte, n*ss)):
					sawOld++
				case mode == integrity.ModeJournal:
					t.Fatalf("cut after op %d (image %d): a journal-mode write is half there", k, i)
				}
			}
		}
		if sawOld == 0 || sawNew == 0 {
			t.Fatalf("mode %d: the sweep saw %d old and %d new states: it cut nothing that matters", mode, sawOld, sawNew)
		}
	}
}

// TestIntegrityTruncatedDevice: a superblock promising more sectors than
// the device holds is refused even when the device cannot tell its size
// itself (a bytes.Reader through OpenDevice): the fuzzer found a
// 114688-byte volume opened on a 90112-byte device.
func TestIntegrityTruncatedDevice(t *testing.T) {
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "i.img")
	if err := os.WriteFile(p, make([]byte, 256<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := blkcrypt.FormatIntegrity(ctx, p, blkcrypt.FormatIntegrityOptions{InterleaveSectors: 8}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	o := blkcrypt.OpenOptions{Type: blkcrypt.TypeIntegrity, ReadOnly: true}
	v, err := blkcrypt.OpenDevice(ctx, bytes.NewReader(b), o)
	if err != nil {
		t.Fatalf("whole image: %v", err)
	}
	v.Close()
	for _, n := range []int{90112, 65536} {
		v, err := blkcrypt.OpenDevice(ctx, bytes.NewReader(b[:n]), o)
		if err == nil {
			t.Errorf("a %d-byte volume opened on a %d-byte device", v.Size(), n)
			v.Close()
		} else if !strings.Contains(err.Error(), "smaller than the layout") {
			t.Errorf("%d bytes: %v", n, err)
		}
	}
}
