package luks2

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
)

// hostileShape is luks2_valid_hdr.img with 4 MiB metadata copies filled
// with n extra keyslots (one digest lists them all) or n extra segments:
// the shapes where a pairwise check would cost n² (cryptsetup 2.6.1 itself
// needs over eight minutes for 40,000 segments).
func hostileShape(t testing.TB, shape string, n int) []byte {
	m := &vimg{buf: validHdr(t)}
	if tt, ok := t.(*testing.T); ok {
		m.t = tt
	}
	m.resize(0x400000, func(r *jval) {
		switch shape {
		case "keyslots":
			ks := r.get("keyslots")
			d := path(r, "digests", "0", "keyslots")
			for i := 8; i < 8+n; i++ {
				ks.obj = append(ks.obj, jmember{strconv.Itoa(i), parseV(`{"type":"x","key_size":32,"area":{"type":"raw","offset":"` +
					strconv.Itoa(13<<20+i*512) + `","size":"512"}}`)})
				d.arr = append(d.arr, jstr(strconv.Itoa(i)))
			}
			r.get("config").set("keyslots_size", jstr(strconv.Itoa(32<<20)))
			path(r, "segments", "0").set("offset", jstr(strconv.Itoa(48<<20)))
		case "segments":
			sg := r.get("segments")
			path(r, "segments", "0").set("size", jstr("512"))
			for i := 1; i <= n; i++ {
				sg.obj = append(sg.obj, jmember{strconv.Itoa(i), parseV(`{"type":"x","offset":"` + strconv.Itoa(16<<20+i*512) + `","size":"512"}`)})
			}
		}
	}, -1)
	return append(m.buf, make([]byte, 40<<20)...)
}

// TestHostileShapes: tens of thousands of keyslots or segments load (they
// are valid), and a context cancelled during their validation stops it.
func TestHostileShapes(t *testing.T) {
	for _, c := range []struct {
		shape string
		n     int
	}{{"keyslots", 20000}, {"segments", 40000}} {
		t.Run(c.shape, func(t *testing.T) {
			buf := hostileShape(t, c.shape, c.n)
			h, err := Read(luksutil.NewMemDevice(0, buf))
			if err != nil {
				t.Fatal(err)
			}
			got := len(h.Keyslots())
			if c.shape == "segments" {
				got = len(h.Segments())
			}
			if got < c.n {
				t.Fatalf("%d %s, want more than %d", got, c.shape, c.n)
			}
			// The parse of such a copy looks at the context about 40 times,
			// so the 41st look falls at the end of the first copy's parse
			// or in its validation, which looks too.
			mid := &stopAfter{Context: context.Background()}
			mid.n.Store(40)
			if _, err := ReadContext(mid, luksutil.NewMemDevice(0, buf)); !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled during validation: %v", err)
			}
		})
	}
}

func BenchmarkReadHostileShapes(b *testing.B) {
	for _, shape := range []string{"keyslots", "segments"} {
		buf := hostileShape(b, shape, 20000)
		b.Run(shape, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := Read(luksutil.NewMemDevice(0, buf)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
