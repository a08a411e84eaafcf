package luks2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
)

// bigTokenImage is luks2_valid_hdr.img with 4 MiB metadata copies whose
// token 0 has n extra members, the red-team header of issue #18 item 4
// (a linear scan per member made 100k members take 38 s).
func bigTokenImage(t *testing.T, n int) []byte {
	t.Helper()
	m := &vimg{t: t, buf: validHdr(t)}
	m.resize(0x400000, func(r *jval) {
		tok := jobj()
		tok.obj = append(make([]jmember, 0, n+2), jmember{"type", jstr("big")}, jmember{"keyslots", jarrStr()})
		for i := 0; i < n; i++ {
			tok.obj = append(tok.obj, jmember{"m" + strconv.Itoa(i), jint(int64(i % 10))})
		}
		r.get("tokens").set("0", tok)
	}, -1)
	return m.buf
}

// TestHugeTokenParsesLikeCryptsetup: tokens of 100k and 250k members in a
// 4 MiB metadata area load within a small multiple of cryptsetup's own
// luksDump of the same image (10x + 2 s: a generous bound for a noisy
// shared VM; the quadratic parser took minutes).
func TestHugeTokenParsesLikeCryptsetup(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	for _, n := range []int{100_000, 250_000} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "big.img")
			writeSparse(t, img, bigTokenImage(t, n))
			start := time.Now()
			if out, err := cs.Run("luksDump", img); err != nil {
				t.Fatalf("cryptsetup refuses the image: %v\n%s", err, oneLineOf(out))
			}
			theirs := time.Since(start)

			dev := lukstest.Open(t, img)
			start = time.Now()
			h, err := Read(dev)
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			tok := h.Tokens()[0]
			ours := time.Since(start)
			if !bytes.Contains(tok, []byte(fmt.Sprintf(`"m%d":`, n-1))) || h.TokenIDs()[0] != 0 {
				t.Fatalf("token 0 lost members (%d bytes)", len(tok))
			}
			t.Logf("%d members: blkcrypt %v, cryptsetup luksDump %v", n, ours, theirs)
			if limit := 10*theirs + 2*time.Second; ours > limit {
				t.Fatalf("parse took %v, more than %v (cryptsetup: %v)", ours, limit, theirs)
			}
		})
	}
}

// stopAfter is a context whose Err reports context.Canceled from its n-th
// call on: it shows the parser looks at its context during the parse, not
// only before it.
type stopAfter struct {
	context.Context
	n atomic.Int64
}

func (c *stopAfter) Err() error {
	if c.n.Add(-1) < 0 {
		return context.Canceled
	}
	return nil
}

func TestReadContextCancelled(t *testing.T) {
	buf := bigTokenImage(t, 250_000)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ReadContext(ctx, luksutil.NewMemDevice(0, buf)); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v", err)
	}
	// Cancelled a few checks into the first copy's JSON.
	mid := &stopAfter{Context: context.Background()}
	mid.n.Store(4)
	_, err := ReadContext(mid, luksutil.NewMemDevice(0, buf))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("context cancelled during the parse: %v", err)
	}
	if errors.Is(err, ErrCorruptHeader) {
		t.Fatalf("a cancelled parse must not look like a damaged header: %v", err)
	}
	// And the image is fine: the error came from the context.
	if _, err := ReadContext(context.Background(), luksutil.NewMemDevice(0, buf)); err != nil {
		t.Fatal(err)
	}
}

// TestJSONRepeatedMembers: json-c keeps a repeated member at its first
// place with its last value, and so does the tree, in small and indexed
// objects.
func TestJSONRepeatedMembers(t *testing.T) {
	for _, n := range []int{2, indexMin + 5} {
		var b bytes.Buffer
		b.WriteString(`{"a":1`)
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, `,"k%d":%d`, i, i)
		}
		b.WriteString(`,"a":2,"k0":"x"}`)
		v, err := parseJSON(b.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if len(v.obj) != n+1 || v.obj[0].key != "a" || v.get("a").s != "2" || v.obj[1].key != "k0" || v.get("k0").s != "x" {
			t.Fatalf("n=%d: %s", n, v.appendJSON(nil))
		}
	}
}

// TestJSONIndexFollowsEdits: write.go edits obj directly (insertions
// keep ids sorted); lookups must still see every member.
func TestJSONIndexFollowsEdits(t *testing.T) {
	v := jobj()
	for i := 0; i < 3*indexMin; i += 2 {
		v.set(strconv.Itoa(i), jint(int64(i)))
	}
	if v.get("4") == nil {
		t.Fatal("lookup before the edit")
	}
	insertSorted(v, "5", jint(5))
	v.obj = append(v.obj[:1], v.obj[2:]...) // drops "2" behind the index's back
	v.obj[0] = jmember{"zero", jint(0)}     // renames "0", same length
	for i := 0; i < 3*indexMin; i += 2 {
		want := i != 2 && i != 0
		if got := v.get(strconv.Itoa(i)) != nil; got != want {
			t.Fatalf("member %d present %v, want %v", i, got, want)
		}
	}
	if v.get("5") == nil || v.get("zero") == nil {
		t.Fatal("edited members missing")
	}
}

// TestJSONDepthLimit: json-c refuses a value 32 levels below the top; so
// does the parser, without deep recursion on a megabyte of brackets.
func TestJSONDepthLimit(t *testing.T) {
	ok := bytes.Repeat([]byte("["), 31)
	ok = append(append(ok, '0'), bytes.Repeat([]byte("]"), 31)...)
	if _, err := parseJSON(ok); err != nil {
		t.Fatalf("31 levels: %v", err)
	}
	deep := append(bytes.Repeat([]byte("["), 1<<20), '0')
	if _, err := parseJSON(deep); err == nil {
		t.Fatal("a megabyte of brackets parsed")
	}
}
