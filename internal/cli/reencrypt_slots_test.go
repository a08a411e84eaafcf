package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/nbd/nbdclient"
)

// Keyslots and tokens through blkcrypt reencrypt and serve --reencrypt,
// side by side with cryptsetup reencrypt on a copy of the same volume.

// slotsImage makes a 24 MiB cryptsetup LUKS2 volume with keyslot 0
// (pass[0]) and, with two, keyslot 1 (pass[1]); token 0 is bound to
// keyslot 0, token 1 to keyslot 1 (to none with one keyslot), token 2 to
// both. Its 8 MiB of data hold plain.
func slotsImage(t *testing.T, dir string, two bool) (img string, pass []string, plain []byte) {
	t.Helper()
	needTool(t, "cryptsetup", "cryptsetup-bin")
	img = filepath.Join(dir, "base.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 24<<20); err != nil {
		t.Fatal(err)
	}
	pass = []string{writeFile(t, dir, "p0", []byte("slot zero pass")), writeFile(t, dir, "p1", []byte("slot one pass"))}
	must := func(args ...string) {
		t.Helper()
		if out, err := cryptsetup(t, args...); err != nil {
			t.Fatalf("cryptsetup %q: %v\n%s", args, err, out)
		}
	}
	must(append([]string{"luksFormat", "-q", "--type", "luks2", "--key-file", pass[0], img}, reencFast...)...)
	slots := [][]string{{"0"}, {}, {"0"}}
	if two {
		must(append([]string{"luksAddKey", "-q", "--key-file", pass[0], img, pass[1]}, reencFast...)...)
		slots = [][]string{{"0"}, {"1"}, {"0", "1"}}
	}
	for i, s := range slots {
		b, _ := json.Marshal(map[string]any{"type": fmt.Sprint("t", i), "keyslots": s})
		must("token", "import", "--json-file", writeFile(t, dir, fmt.Sprint("tok", i), b), img)
	}
	plain = randBytes(8 << 20)
	if code, _, e := run(t, nil, "write", img, "-i", writeFile(t, dir, "in", plain), "--key-file", pass[0]); code != 0 {
		t.Fatalf("write: %s", e)
	}
	return img, pass, plain
}

// cliSlotState is what cryptsetup reads: for each passphrase file the
// keyslots it opens, and each token's keyslots (token export).
func cliSlotState(t *testing.T, img string, pass []string) string {
	t.Helper()
	out, err := cryptsetup(t, "luksDump", "--dump-json-metadata", img)
	if err != nil {
		t.Fatalf("luksDump: %v\n%s", err, out)
	}
	var md struct {
		Keyslots map[string]struct{ Type string }
		Tokens   map[string]json.RawMessage
	}
	if err := json.Unmarshal([]byte(out), &md); err != nil {
		t.Fatal(err)
	}
	var ids []int
	for id := range md.Keyslots {
		n, _ := strconv.Atoi(id)
		ids = append(ids, n)
	}
	sort.Ints(ids)
	opens := map[int][]int{}
	for p, pf := range pass {
		for _, id := range ids {
			if _, err := cryptsetup(t, "open", "--test-passphrase", "--key-file", pf, "--key-slot", strconv.Itoa(id), img); err == nil {
				opens[p] = append(opens[p], id)
			}
		}
	}
	tokens := map[string][]string{}
	for id := range md.Tokens {
		out, err := cryptsetup(t, "token", "export", "--token-id", id, img)
		var tk struct{ Keyslots []string }
		if err != nil || json.Unmarshal([]byte(out), &tk) != nil {
			t.Fatalf("token export %s: %v\n%s", id, err, out)
		}
		tokens[id] = append([]string{}, tk.Keyslots...)
	}
	return fmt.Sprintf("keyslots %v, opens %v, tokens %v", ids, opens, tokens)
}

func copyTo(t *testing.T, src, dst string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dst
}

// exitOf is a command's exit code (0, or its ExitError's).
func exitOf(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestReencryptCLISlotsLikeCryptsetup: blkcrypt reencrypt and serve
// --reencrypt with -S 0 and -S 1 on a volume with two keyslots, and
// without -S on a volume with one, run to the end (exit 0) as cryptsetup
// reencrypt does, and leave what cryptsetup's run leaves: the keyslots
// each passphrase opens and every token's keyslots. The data reads back.
func TestReencryptCLISlotsLikeCryptsetup(t *testing.T) {
	needTool(t, "cryptsetup", "cryptsetup-bin")
	for _, tc := range []struct {
		name string
		two  bool
		slot int // -1: no -S
	}{
		{"one keyslot, no -S", false, -1},
		{"two keyslots, -S 0", true, 0},
		{"two keyslots, -S 1", true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			base, pass, plain := slotsImage(t, dir, tc.two)
			pf := pass[max(tc.slot, 0)]
			var sArgs []string
			if tc.slot >= 0 {
				sArgs = []string{"-S", strconv.Itoa(tc.slot)}
			}
			theirs := copyTo(t, base, filepath.Join(dir, "theirs.img"))
			if out, err := cryptsetup(t, append(append([]string{"reencrypt", "--force-offline-reencrypt", "-q", "--key-file", pf, theirs}, sArgs...), reencFast...)...); err != nil {
				t.Fatalf("cryptsetup reencrypt: %v\n%s", err, out)
			}
			want := cliSlotState(t, theirs, pass)

			check := func(t *testing.T, img string) {
				t.Helper()
				if got := cliSlotState(t, img, pass); got != want {
					t.Fatalf("after blkcrypt:\n got %s\nwant %s (cryptsetup's)", got, want)
				}
				code, got, e := run(t, nil, "read", img, "--key-file", pf, "--length", fmt.Sprint(len(plain)))
				if code != 0 || got != string(plain) {
					t.Fatalf("read after reencryption: exit %d %s (plaintext equal: %v)", code, e, got == string(plain))
				}
			}
			t.Run("reencrypt", func(t *testing.T) {
				ours := copyTo(t, base, filepath.Join(t.TempDir(), "ours.img"))
				if code, _, e := run(t, nil, append(append([]string{"reencrypt", ours, "--key-file", pf}, sArgs...), reencFast...)...); code != 0 {
					t.Fatalf("blkcrypt reencrypt: exit %d: %s", code, e)
				}
				check(t, ours)
			})
			t.Run("serve --reencrypt", func(t *testing.T) {
				ours := copyTo(t, base, filepath.Join(t.TempDir(), "ours.img"))
				args := append(append([]string{ours, "--key-file", pf, "--reencrypt", "--hotzone-size", "1m"}, sArgs...), reencFast...)
				sock, errb, stop := startGatewayCLI(t, args...)
				// The header is in reencryption from before serve listens.
				c, err := nbdclient.Dial(context.Background(), "nbd+unix:///?socket="+sock, nbdclient.Options{})
				if err != nil {
					t.Fatalf("dial: %v\n%s", err, errb.String())
				}
				for deadline := time.Now().Add(time.Minute); inReencryption(t, ours) && time.Now().Before(deadline); {
					time.Sleep(10 * time.Millisecond)
				}
				c.Close()
				if code := stop(); code != 0 {
					t.Fatalf("serve --reencrypt: exit %d: %s", code, errb.String())
				}
				check(t, ours)
			})
		})
	}
}

// TestReencryptCLISlotRefusalsLikeCryptsetup: the refusals cryptsetup
// makes before writing (a passphrase that does not open the named
// keyslot, a key file for a volume with two keyslots and no -S) exit with
// cryptsetup's code and leave the image as it was, byte for byte.
func TestReencryptCLISlotRefusalsLikeCryptsetup(t *testing.T) {
	dir := t.TempDir()
	base, pass, _ := slotsImage(t, dir, true)
	wrong := writeFile(t, dir, "wrong", []byte("not a passphrase here"))
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"wrong passphrase, -S 0", []string{"--key-file", wrong, "-S", "0"}},
		{"keyslot 0's passphrase, -S 1", []string{"--key-file", pass[0], "-S", "1"}},
		{"two keyslots, no -S", []string{"--key-file", pass[0]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			theirs := copyTo(t, base, filepath.Join(t.TempDir(), "theirs.img"))
			ours := copyTo(t, base, filepath.Join(t.TempDir(), "ours.img"))
			before := fileSum(t, base)
			out, err := cryptsetup(t, append(append([]string{"reencrypt", "--force-offline-reencrypt", "-q", theirs}, tc.args...), reencFast...)...)
			want := exitOf(err)
			if want == 0 || fileSum(t, theirs) != before {
				t.Fatalf("cryptsetup: exit %d, image changed %v\n%s", want, fileSum(t, theirs) != before, out)
			}
			code, _, e := run(t, nil, append(append([]string{"reencrypt", ours}, tc.args...), reencFast...)...)
			if code != want {
				t.Errorf("blkcrypt reencrypt: exit %d, cryptsetup's %d: %s", code, want, e)
			}
			if fileSum(t, ours) != before {
				t.Fatalf("the refused blkcrypt reencrypt changed the image (%s)", e)
			}
		})
	}
}
