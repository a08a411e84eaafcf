package luks2_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
	"github.com/blkcrypt/blkcrypt/luks2"
)

// Keyslots and tokens through a reencryption, side by side with
// cryptsetup 2.6.1: two copies of one cryptsetup-made volume, cryptsetup
// reencrypt on one and ours on the other with the same options, then the
// keyslots each passphrase opens and every token's keyslot list must be
// the same on both (as cryptsetup reads them).

var slotPass = [][]byte{[]byte("slot zero"), []byte("slot one")}

// slotsVolume makes a cryptsetup volume with keyslot 0 (slotPass[0]) and,
// with two, keyslot 1 (slotPass[1]); token 0 is bound to keyslot 0, token
// 1 to keyslot 1 (none with one keyslot), token 2 to both. only1 leaves
// keyslot 1 alone (keyslot 0 killed). The data area holds plain,
// encrypted with the volume key.
func slotsVolume(t *testing.T, cs *lukstest.Cryptsetup, img string, two, only1 bool) []byte {
	t.Helper()
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, reencImg); err != nil {
		t.Fatal(err)
	}
	fast := []string{"--batch-mode", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"}
	cs.MustRun(append([]string{"luksFormat", "--type", "luks2", "--key-file", cs.KeyFile(slotPass[0]), img}, fast...)...)
	if two || only1 {
		cs.MustRun(append([]string{"luksAddKey", "--key-file", cs.KeyFile(slotPass[0]), img, cs.KeyFile(slotPass[1])}, fast...)...)
	}
	if only1 {
		cs.MustRun("luksKillSlot", "--batch-mode", img, "0")
	}
	tok := func(typ string, slots ...string) {
		b, _ := json.Marshal(map[string]any{"type": typ, "keyslots": append([]string{}, slots...), "x-note": "follows its keyslot"})
		cs.MustRun("token", "import", "--json-file", cs.KeyFile(b), img)
	}
	switch {
	case only1:
		tok("t-one", "1")
	case two:
		tok("t-zero", "0")
		tok("t-one", "1")
		tok("t-both", "0", "1")
	default:
		tok("t-zero", "0")
		tok("t-unbound")
		tok("t-zero-again", "0")
	}
	plain := make([]byte, reencImg-16<<20)
	rand.Read(plain)
	pass := slotPass[0]
	if only1 {
		pass = slotPass[1]
	}
	writePlain(t, cs, img, pass, plain)
	return plain
}

// slotState is what cryptsetup reads of a volume's keyslots and tokens.
type slotState struct {
	Opens  map[int][]int       // passphrase index: keyslots it opens
	Tokens map[string][]string // token id: its keyslots
	Other  []string            // keyslots of other types (reencrypt)
	Req    bool                // online-reencrypt-v2 still set
}

func readSlotState(t *testing.T, cs *lukstest.Cryptsetup, img string) slotState {
	t.Helper()
	var md struct {
		Keyslots map[string]struct{ Type string }
		Tokens   map[string]struct{ Keyslots []string }
		Config   struct {
			Requirements struct{ Mandatory []string }
		}
	}
	if err := json.Unmarshal([]byte(cs.MustRun("luksDump", "--dump-json-metadata", img)), &md); err != nil {
		t.Fatal(err)
	}
	st := slotState{Opens: map[int][]int{}, Tokens: map[string][]string{}}
	var ids []int
	for id, k := range md.Keyslots {
		n, _ := strconv.Atoi(id)
		if k.Type != "luks2" {
			st.Other = append(st.Other, id+":"+k.Type)
			continue
		}
		ids = append(ids, n)
	}
	sort.Ints(ids)
	sort.Strings(st.Other)
	for p, pass := range slotPass {
		for _, id := range ids {
			if cs.TestPassphrase(img, pass, id) {
				st.Opens[p] = append(st.Opens[p], id)
			}
		}
	}
	for id := range md.Tokens {
		// cryptsetup token export is the form a token plugin reads.
		var tk struct{ Keyslots []string }
		if err := json.Unmarshal([]byte(cs.MustRun("token", "export", "--token-id", id, img)), &tk); err != nil {
			t.Fatal(err)
		}
		st.Tokens[id] = append([]string{}, tk.Keyslots...)
	}
	st.Req = len(md.Config.Requirements.Mandatory) > 0
	return st
}

func cryptsetupReencrypt(cs *lukstest.Cryptsetup, img string, pass []byte, slot *int) (string, error) {
	args := []string{"reencrypt", "--force-offline-reencrypt", "--batch-mode", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", cs.KeyFile(pass)}
	if slot != nil {
		args = append(args, "--key-slot", strconv.Itoa(*slot))
	}
	return cs.Run(append(args, img)...)
}

func intp(i int) *int { return &i }

func copyImage(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// runOnline drives the library's online reencryption (OpenOnline, Step,
// Finish) as serve --reencrypt does, without the requests around it.
func runOnline(t *testing.T, img string, pass []byte, o luks2.ReencryptOptions) error {
	t.Helper()
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	o.Keyslot = reencKDF
	on, err := luks2.OpenOnline(context.Background(), luks2.File{File: f}, pass, o, true)
	if err != nil {
		return err
	}
	defer on.Close()
	for {
		if _, n := on.Next(); n == 0 {
			return on.Finish()
		}
		if err := on.Step(); err != nil {
			return err
		}
	}
}

// TestReencryptKeyslotsAndTokensLikeCryptsetup: with one keyslot and no
// --key-slot, and with two keyslots and --key-slot 0 or 1, our run
// (offline and online) completes and leaves the keyslots each passphrase
// opens and every token's keyslots as cryptsetup's own run leaves them:
// tokens follow their keyslot to its new number, and lose the keyslots
// removed at the end.
func TestReencryptKeyslotsAndTokensLikeCryptsetup(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	for _, tc := range []struct {
		name       string
		two, only1 bool
		slot       *int
		pass       int
		want       slotState // as cryptsetup 2.6.1 leaves it
	}{
		{"one keyslot, any", false, false, nil, 0, slotState{
			Opens:  map[int][]int{0: {1}},
			Tokens: map[string][]string{"0": {"1"}, "1": {}, "2": {"1"}}}},
		{"keyslot 1 alone, any", false, true, nil, 1, slotState{
			Opens:  map[int][]int{1: {0}},
			Tokens: map[string][]string{"0": {"0"}}}},
		{"two keyslots, -S 0", true, false, intp(0), 0, slotState{
			Opens:  map[int][]int{0: {2}},
			Tokens: map[string][]string{"0": {"2"}, "1": {}, "2": {"2"}}}},
		{"two keyslots, -S 1", true, false, intp(1), 1, slotState{
			Opens:  map[int][]int{1: {2}},
			Tokens: map[string][]string{"0": {}, "1": {"2"}, "2": {"2"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := cs.With(t)
			dir := t.TempDir()
			base := filepath.Join(dir, "base.img")
			plain := slotsVolume(t, cs, base, tc.two, tc.only1)
			pass := slotPass[tc.pass]

			theirs := filepath.Join(dir, "theirs.img")
			copyImage(t, base, theirs)
			if out, err := cryptsetupReencrypt(cs, theirs, pass, tc.slot); err != nil {
				t.Fatalf("cryptsetup reencrypt: %v\n%s", err, out)
			}
			want := readSlotState(t, cs, theirs)
			if !reflect.DeepEqual(want, tc.want) {
				t.Fatalf("cryptsetup's run left %+v; this test expects %+v", want, tc.want)
			}
			for _, way := range []string{"offline", "online", "init then cryptsetup", "stopped and resumed", "resumed by the new keyslot"} {
				t.Run(way, func(t *testing.T) {
					ours := filepath.Join(t.TempDir(), "ours.img")
					copyImage(t, base, ours)
					o := luks2.ReencryptOptions{Slot: tc.slot}
					var err error
					switch way {
					case "offline":
						err = reencrypt(t, ours, pass, o)
					case "online":
						err = runOnline(t, ours, pass, o)
					case "init then cryptsetup":
						o.InitOnly = true
						if err = reencrypt(t, ours, pass, o); err == nil {
							// Without --key-slot: cryptsetup resumes with -S N
							// only when keyslot N opens both keys, never so.
							out, cerr := cs.Run("reencrypt", "--resume-only", "--force-offline-reencrypt", "--batch-mode", "--key-file", cs.KeyFile(pass), ours)
							if cerr != nil {
								err = fmt.Errorf("cryptsetup reencrypt --resume-only: %w\n%s", cerr, out)
							}
						}
					case "stopped and resumed", "resumed by the new keyslot":
						o.StopAfter, o.HotzoneSize = 2, 1<<20
						if err = reencrypt(t, ours, pass, o); err == nil {
							o.StopAfter, o.ResumeOnly = 0, true
							if way == "resumed by the new keyslot" {
								o.Slot = intp(want.Opens[tc.pass][0])
							}
							err = reencrypt(t, ours, pass, o)
						}
					}
					if err != nil {
						t.Fatalf("reencrypt: %v", err)
					}
					if got := readSlotState(t, cs, ours); !reflect.DeepEqual(got, want) {
						t.Fatalf("keyslots and tokens after our run:\n got %+v\nwant %+v (cryptsetup's)", got, want)
					}
					checkPlain(t, cs, ours, pass, plain)
				})
			}
		})
	}
}

// TestReencryptSeveralKeyslotsRefusedLikeCryptsetup: without --key-slot,
// one passphrase cannot keep a volume with two keyslots whole; cryptsetup
// refuses a key file there, and so do we, both before writing anything.
func TestReencryptSeveralKeyslotsRefusedLikeCryptsetup(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()
	img := filepath.Join(dir, "v.img")
	slotsVolume(t, cs, img, true, false)
	before := lukstest.ReadImage(t, img)
	if out, err := cryptsetupReencrypt(cs, img, slotPass[0], nil); err == nil {
		t.Fatalf("cryptsetup reencrypt with a key file and two keyslots ran:\n%s", out)
	}
	if !bytes.Equal(lukstest.ReadImage(t, img), before) {
		t.Fatal("cryptsetup's refusal changed the image")
	}
	if err := reencrypt(t, img, slotPass[0], luks2.ReencryptOptions{}); !errors.Is(err, luks2.ErrInvalidOptions) {
		t.Fatalf("our reencrypt with two keyslots and no slot: %v (want ErrInvalidOptions)", err)
	}
	if !bytes.Equal(lukstest.ReadImage(t, img), before) {
		t.Fatal("our refusal changed the image")
	}
}

// TestReencryptRefusalWritesNothing: every check that can refuse a run
// comes before its first write; the image stays the same byte for byte.
func TestReencryptRefusalWritesNothing(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()
	img := filepath.Join(dir, "v.img")
	slotsVolume(t, cs, img, true, false)
	before := lukstest.ReadImage(t, img)
	for _, tc := range []struct {
		name string
		pass []byte
		o    luks2.ReencryptOptions
		want error
	}{
		{"wrong passphrase, -S 0", []byte("wrong"), luks2.ReencryptOptions{Slot: intp(0)}, luks2.ErrWrongPassphrase},
		{"keyslot 0's passphrase, -S 1", slotPass[0], luks2.ReencryptOptions{Slot: intp(1)}, luks2.ErrWrongPassphrase},
		{"no such keyslot", slotPass[0], luks2.ReencryptOptions{Slot: intp(5)}, luks2.ErrSlotInactive},
		{"hotzone below a sector", slotPass[0], luks2.ReencryptOptions{Slot: intp(0), HotzoneSize: 100}, luks2.ErrInvalidOptions},
		{"resume-only", slotPass[0], luks2.ReencryptOptions{Slot: intp(0), ResumeOnly: true}, luks2.ErrNoReencryption},
	} {
		for _, online := range []bool{false, true} {
			t.Run(fmt.Sprint(tc.name, " online=", online), func(t *testing.T) {
				var err error
				if online {
					err = runOnline(t, img, tc.pass, tc.o)
				} else {
					err = reencrypt(t, img, tc.pass, tc.o)
				}
				if !errors.Is(err, tc.want) {
					t.Fatalf("got %v, want %v", err, tc.want)
				}
				if !bytes.Equal(lukstest.ReadImage(t, img), before) {
					t.Fatal("the refused run changed the image")
				}
			})
		}
	}
}
