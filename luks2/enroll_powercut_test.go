package luks2_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
	"github.com/blkcrypt/blkcrypt/internal/powercut"
	"github.com/blkcrypt/blkcrypt/luks2"
)

// enrollState is what an enrollment changes, as a string: the keyslots
// and, per token, the keyslots it names.
func enrollState(keyslots []int, tokens map[int][]string) string {
	sort.Ints(keyslots)
	ids := make([]int, 0, len(tokens))
	for id := range tokens {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	var b strings.Builder
	fmt.Fprint(&b, "keyslots ", keyslots, " tokens")
	for _, id := range ids {
		fmt.Fprintf(&b, " %d:%v", id, tokens[id])
	}
	return b.String()
}

func ourEnrollState(h *luks2.Header) string {
	toks := map[int][]string{}
	for id, js := range h.Tokens() {
		var t struct {
			Keyslots []string `json:"keyslots"`
		}
		json.Unmarshal(js, &t)
		toks[id] = t.Keyslots
	}
	return enrollState(h.ActiveKeyslots(), toks)
}

func csEnrollState(cs *lukstest.Cryptsetup, img string) (string, error) {
	out, err := cs.Run("luksDump", "--dump-json-metadata", img)
	if err != nil {
		return "", fmt.Errorf("luksDump: %v: %s", err, out)
	}
	var m struct {
		Keyslots map[string]json.RawMessage `json:"keyslots"`
		Tokens   map[string]struct {
			Keyslots []string `json:"keyslots"`
		} `json:"tokens"`
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		return "", err
	}
	var ks []int
	for k := range m.Keyslots {
		n, _ := strconv.Atoi(k)
		ks = append(ks, n)
	}
	toks := map[int][]string{}
	for k, t := range m.Tokens {
		n, _ := strconv.Atoi(k)
		toks[n] = t.Keyslots
	}
	return enrollState(ks, toks), nil
}

// TestAddKeyWithTokenPowerCut: an enrollment (AddKeyWithToken: a keyslot
// and a token naming it) cut by a power failure after any of its writes
// and syncs, with several sets of surviving unsynced writes, leaves the
// old header (no new keyslot, no new token) or the new one (both, and the
// new passphrase opens the new keyslot), the same for cryptsetup as for
// us; the old passphrases open throughout. A token replaced in the same
// update is likewise the old or the new one.
func TestAddKeyWithTokenPowerCut(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()
	old, other, nw := []byte("old passphrase"), []byte("other passphrase"), []byte("new passphrase")
	basePath := lukstest.NewImage(t, dir, "base.img", pcSize)
	cs.MustRun(append(append([]string{"luksFormat", "--type", "luks2", "--batch-mode", "--key-file", cs.KeyFile(old),
		"--offset", pcDataOffS, "--luks2-keyslots-size", pcKeyslotsS}, csFast...), basePath)...)
	cs.MustRun(append([]string{"luksAddKey", "--batch-mode", "--key-file", cs.KeyFile(old), basePath, cs.KeyFile(other)}, csFast...)...)
	cs.MustRun("token", "import", "--token-id", "3", "--json-file", writeTemp(t, `{"type":"blkcrypt-test","keyslots":["0"]}`), basePath)
	base := lukstest.ReadImage(t, basePath)
	key := cs.VolumeKey(basePath, old)

	enroll := func(id int, replace bool) func(dev *powercut.Device) error {
		return func(dev *powercut.Device) error {
			h, err := luks2.Read(dev)
			if err != nil {
				return err
			}
			_, _, err = h.AddKeyWithToken(context.Background(), dev, key, nw, fast, id,
				[]byte(`{"type":"clevis","keyslots":[],"jwe":{"protected":"e30"}}`), replace)
			return err
		}
	}
	cases := []struct {
		name    string
		id      int
		replace bool
	}{{"new-token", luks2.AnyToken, false}, {"replace-token", 3, true}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs := cs.With(t)
			d := powercut.New(base)
			h, err := luks2.Read(d)
			if err != nil {
				t.Fatal(err)
			}
			before := ourEnrollState(h)
			if err := enroll(tc.id, tc.replace)(d); err != nil {
				t.Fatal(err)
			}
			if h, err = luks2.Read(d); err != nil {
				t.Fatal(err)
			}
			after := ourEnrollState(h)
			slot := h.ActiveKeyslots()[len(h.ActiveKeyslots())-1]
			if after == before || slot != 2 {
				t.Fatalf("the enrollment changes %q to %q (keyslot %d)", before, after, slot)
			}
			t.Logf("before: %s; after: %s", before, after)
			keep := lukstest.Expect{Must: []lukstest.Key{lukstest.SlotKey(old, 0), lukstest.SlotKey(other, 1)}}
			done := lukstest.Expect{Must: append(keep.Must, lukstest.SlotKey(nw, 2))}
			var nAfter, nBefore int
			lukstest.Sweep{Seed: 7}.Run(t, base, enroll(tc.id, tc.replace), func(t *testing.T, img, what string) {
				hd, _, closeH, err := readLUKS(img)
				if err != nil {
					t.Fatalf("%s: header unreadable: %v", what, err)
				}
				ours := ourEnrollState(hd.(*luks2.Header))
				closeH()
				theirs, err := csEnrollState(cs, img)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if ours != theirs || ours != before && ours != after {
					t.Fatalf("%s: we read %q, cryptsetup %q; it must be %q or %q", what, ours, theirs, before, after)
				}
				if ours == after {
					nAfter++
					cs.Judge(t, img, what, oursLUKS2, done)
				} else {
					nBefore++
					cs.Judge(t, img, what, oursLUKS2, keep)
				}
			})
			if nAfter == 0 || nBefore == 0 {
				t.Fatalf("the sweep saw %d old and %d new states: it cannot judge atomicity", nBefore, nAfter)
			}
		})
	}
}

// TestAddKeyWithTokenRefuses: a malformed token or a token id in use is
// refused before the key derivation, and nothing is written.
func TestAddKeyWithTokenRefuses(t *testing.T) {
	dev := luksutil.NewMemDevice(pcSize, nil)
	key := randKey(64)
	h, err := luks2.Format(dev, key, []byte("pass"), luks2.FormatOptions{Keyslot: fast, KeyslotsSize: pcKeyslots, DataOffset: pcDataOff})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.ImportToken(dev, 0, []byte(`{"type":"x","keyslots":[]}`), nil, false); err != nil {
		t.Fatal(err)
	}
	seq := h.SeqID()
	for _, tc := range []struct {
		tok  string
		id   int
		want error
	}{
		{`{"type":"x"}`, luks2.AnyToken, luks2.ErrInvalidOptions},
		{`{"keyslots":[]}`, luks2.AnyToken, luks2.ErrInvalidOptions},
		{`[1]`, luks2.AnyToken, luks2.ErrInvalidOptions},
		{`{"type":"x","keyslots":[]} trailing`, luks2.AnyToken, luks2.ErrInvalidOptions},
		{`{"type":"x","keyslots":["7"]}`, luks2.AnyToken, luks2.ErrInvalidOptions},
		{`{"type":"x","keyslots":[]}`, 0, luks2.ErrSlotInUse},
		{`{"type":"x","keyslots":[]}`, 32, luks2.ErrInvalidOptions},
	} {
		_, _, err := h.AddKeyWithToken(context.Background(), dev, key, []byte("new"), fast, tc.id, []byte(tc.tok), false)
		if !errors.Is(err, tc.want) {
			t.Errorf("token %s id %d: %v, want %v", tc.tok, tc.id, err, tc.want)
		}
		if h2, err := luks2.Read(dev); err != nil || h2.SeqID() != seq || len(h2.ActiveKeyslots()) != 1 {
			t.Fatalf("token %s: the header changed", tc.tok)
		}
	}
	if _, _, err := h.AddKeyWithToken(context.Background(), dev, randKey(64), []byte("new"), fast, luks2.AnyToken, []byte(`{"type":"x","keyslots":[]}`), false); !errors.Is(err, luks2.ErrWrongKey) {
		t.Errorf("a wrong volume key: %v", err)
	}
}
