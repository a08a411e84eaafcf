package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// csFormat makes a cryptsetup volume of typ (luks1 or luks2) with fast
// PBKDF2 keyslots, one per passphrase, and returns the image path.
func csFormat(t *testing.T, dir, name, typ string, size int64, pass ...string) string {
	t.Helper()
	img := filepath.Join(dir, name)
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	fast := []string{"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"}
	if typ == "luks1" {
		fast = []string{"--pbkdf-force-iterations", "1000"}
	}
	first := writeFile(t, dir, name+".pass0", []byte(pass[0]))
	if out, err := cryptsetup(t, append([]string{"luksFormat", "-q", "--type", typ, "--key-file", first, img}, fast...)...); err != nil {
		t.Fatalf("cryptsetup luksFormat: %v\n%s", err, out)
	}
	for i, p := range pass[1:] {
		kf := writeFile(t, dir, name+".pass"+string(rune('1'+i)), []byte(p))
		if out, err := cryptsetup(t, append([]string{"luksAddKey", "-q", "--key-file", first, img, kf}, fast...)...); err != nil {
			t.Fatalf("cryptsetup luksAddKey: %v\n%s", err, out)
		}
	}
	return img
}

// csCode runs cryptsetup and returns its exit code.
func csCode(t *testing.T, args ...string) int {
	t.Helper()
	needTool(t, "cryptsetup", "cryptsetup-bin")
	err := exec.Command("cryptsetup", args...).Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("cryptsetup: %v", err)
	}
	return 0
}

func mustCS(t *testing.T, args ...string) string {
	t.Helper()
	out, err := cryptsetup(t, args...)
	if err != nil {
		t.Fatalf("cryptsetup %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func mustRun(t *testing.T, stdin []byte, args ...string) string {
	t.Helper()
	code, out, e := run(t, stdin, args...)
	if code != 0 {
		t.Fatalf("blkcrypt %s: exit %d: %s", strings.Join(args, " "), code, e)
	}
	return out
}

// TestVerbsIsLuksExitCodes: isLuks answers with cryptsetup's exit codes on
// LUKS1, LUKS2, random data and a missing file, with and without --type,
// under both names.
func TestVerbsIsLuksExitCodes(t *testing.T) {
	dir := t.TempDir()
	imgs := []string{
		csFormat(t, dir, "l2.img", "luks2", 20<<20, "a"),
		csFormat(t, dir, "l1.img", "luks1", 4<<20, "a"),
		writeFile(t, dir, "random.img", randBytes(1<<20)),
		writeFile(t, dir, "empty.img", nil),
		filepath.Join(dir, "missing.img"),
	}
	for _, img := range imgs {
		for _, extra := range [][]string{nil, {"--type", "luks1"}, {"--type", "luks2"}, {"-v"}} {
			want := csCode(t, append([]string{"isLuks", img}, extra...)...)
			for _, name := range []string{"isLuks", "is-luks"} {
				code, out, e := run(t, nil, append([]string{name, img}, extra...)...)
				if code != want {
					t.Errorf("%s %s %v: exit %d, cryptsetup %d (%s)", name, filepath.Base(img), extra, code, want, e)
				}
				if len(extra) == 0 && want == 1 && (out != "" || e != "") {
					t.Errorf("%s %s: prints %q %q, cryptsetup prints nothing", name, filepath.Base(img), out, e)
				}
			}
		}
	}
}

// TestVerbsUUID: luksUUID prints what cryptsetup prints, and a UUID set by
// us is the one cryptsetup reads (LUKS1 and LUKS2); a malformed UUID and a
// non-LUKS device get cryptsetup's exit codes.
func TestVerbsUUID(t *testing.T) {
	dir := t.TempDir()
	for _, typ := range []string{"luks1", "luks2"} {
		img := csFormat(t, dir, typ+".img", typ, 20<<20, "a")
		if got, want := mustRun(t, nil, "luksUUID", img), mustCS(t, "luksUUID", img); got != want {
			t.Errorf("%s: luksUUID %q, cryptsetup %q", typ, got, want)
		}
		u := "0A1B2C3D-4E5F-4a6b-8c7d-0123456789AB"
		mustRun(t, nil, "luksUUID", "--uuid", u, img)
		if got := strings.TrimSpace(mustCS(t, "luksUUID", img)); got != strings.ToLower(u) {
			t.Errorf("%s: cryptsetup reads UUID %q after ours set %q", typ, got, u)
		}
		if !strings.Contains(mustCS(t, "luksDump", img), strings.ToLower(u)) {
			t.Errorf("%s: cryptsetup luksDump does not show the new UUID", typ)
		}
		if code, want := func() int { c, _, _ := run(t, nil, "uuid", "--uuid", "not-a-uuid", img); return c }(), csCode(t, "luksUUID", "--uuid", "not-a-uuid", img); code != want {
			t.Errorf("%s: bad --uuid: exit %d, cryptsetup %d", typ, code, want)
		}
	}
	rnd := writeFile(t, dir, "r.img", randBytes(1<<20))
	for _, img := range []string{rnd, filepath.Join(dir, "missing")} {
		code, _, _ := run(t, nil, "luksUUID", img)
		if want := csCode(t, "luksUUID", img); code != want {
			t.Errorf("luksUUID %s: exit %d, cryptsetup %d", filepath.Base(img), code, want)
		}
	}
}

// TestVerbsConfig: label, subsystem and priority set by config are what
// cryptsetup luksDump shows; the refusals exit as cryptsetup's do.
func TestVerbsConfig(t *testing.T) {
	dir := t.TempDir()
	img := csFormat(t, dir, "c.img", "luks2", 20<<20, "a", "b")
	mustRun(t, nil, "config", "--label", "my label", "--subsystem", "sub/1", img)
	d := mustCS(t, "luksDump", img)
	if !strings.Contains(d, "Label:         \tmy label\n") || !strings.Contains(d, "Subsystem:     \tsub/1\n") {
		t.Fatalf("cryptsetup luksDump after config:\n%s", d)
	}
	// As cryptsetup: a label given alone clears the subsystem.
	mustRun(t, nil, "config", "--label", "L2", img)
	if d := mustCS(t, "luksDump", img); !strings.Contains(d, "Label:         \tL2\n") || !strings.Contains(d, "(no subsystem)") {
		t.Fatalf("cryptsetup luksDump after config --label:\n%s", d)
	}
	mustRun(t, nil, "config", "--priority", "prefer", "--key-slot", "1", img)
	mustRun(t, nil, "config", "--priority", "ignore", "--key-slot", "0", img)
	d = mustCS(t, "luksDump", img)
	if !strings.Contains(d, "Priority:   preferred") || !strings.Contains(d, "Priority:   ignored") {
		t.Fatalf("cryptsetup luksDump after config --priority:\n%s", d)
	}
	l1 := csFormat(t, dir, "l1.img", "luks1", 4<<20, "a")
	for _, args := range [][]string{
		{img},
		{"--priority", "prefer", img},
		{"--priority", "bogus", "--key-slot", "0", img},
		{"--priority", "normal", "--key-slot", "7", img},
		{"--label", "x", l1},
		{"--label", "x", filepath.Join(dir, "missing")},
	} {
		code, _, _ := run(t, nil, append([]string{"config"}, args...)...)
		if want := csCode(t, append([]string{"config"}, args...)...); code != want {
			t.Errorf("config %v: exit %d, cryptsetup %d", args, code, want)
		}
	}
}

// oddToken is a token json-c prints differently from its input: a number
// beyond int64, -0, a double's text, an escaped slash, empty containers.
const oddToken = `{"type":"x\/y","keyslots":[],"n":1.50,"b":true,"z":null,"e":{},"u":"\u00e9\u0001/","a":[1,[2,{}]],"big":123456789012345678901,"neg":-0,"small":-99999999999999999999,"exp":1e3}`

// TestVerbsDumpJSONMetadata: --dump-json-metadata prints byte for byte
// what cryptsetup prints, on a header with keyslots, tokens and a label.
func TestVerbsDumpJSONMetadata(t *testing.T) {
	dir := t.TempDir()
	img := csFormat(t, dir, "j.img", "luks2", 20<<20, "a", "b")
	tok := writeFile(t, dir, "tok.json", []byte(oddToken))
	mustCS(t, "token", "import", "--token-id", "5", "--json-file", tok, img)
	mustCS(t, "token", "add", "--key-description", "k:d", "--key-slot", "1", img)
	mustCS(t, "config", "--priority", "prefer", "--key-slot", "1", img)
	want := mustCS(t, "luksDump", "--dump-json-metadata", img)
	for _, args := range [][]string{{"luksDump", "--dump-json-metadata", img}, {"dump", img, "--dump-json-metadata"}} {
		got := mustRun(t, nil, args...)
		if got != want {
			t.Errorf("%v:\n%s\ncryptsetup:\n%s", args, got, want)
		}
		var a, b any
		if json.Unmarshal([]byte(got), &a) != nil || json.Unmarshal([]byte(want), &b) != nil || !reflect.DeepEqual(a, b) {
			t.Errorf("%v: not equal to cryptsetup's as JSON", args)
		}
	}
	l1 := csFormat(t, dir, "l1.img", "luks1", 4<<20, "a")
	code, _, _ := run(t, nil, "luksDump", "--dump-json-metadata", l1)
	if want := csCode(t, "luksDump", "--dump-json-metadata", l1); code != want {
		t.Errorf("--dump-json-metadata on LUKS1: exit %d, cryptsetup %d", code, want)
	}
}

// TestVerbsTokenRoundTrip: tokens imported, added and removed by us are
// what cryptsetup exports and dumps, and the reverse; the refusals exit as
// cryptsetup's do.
func TestVerbsTokenRoundTrip(t *testing.T) {
	dir := t.TempDir()
	img := csFormat(t, dir, "t.img", "luks2", 20<<20, "a", "b")
	user := writeFile(t, dir, "user.json", []byte(`{"type":"user","keyslots":["1"],"x":{"y":[1,2]}}`))
	mustRun(t, nil, "token", "import", "--json-file", user, "--key-slot", "0", img) // id 0
	mustRun(t, []byte(oddToken), "token", "import", "--token-id", "7", img)         // from stdin
	mustRun(t, nil, "token", "add", "--key-description", "user:secret", img)        // id 1, both keyslots
	for id, want := range map[string]string{
		"0": `{"type":"user","keyslots":["1","0"],"x":{"y":[1,2]}}`,
		"1": `{"type":"luks2-keyring","keyslots":["0","1"],"key_description":"user:secret"}`,
	} {
		if got := mustCS(t, "token", "export", "--token-id", id, img); got != want {
			t.Errorf("cryptsetup exports token %s as %s, want %s", id, got, want)
		}
	}
	// Our export of every token is cryptsetup's, byte for byte.
	for _, id := range []string{"0", "1", "7"} {
		if got, want := mustRun(t, nil, "token", "export", "--token-id", id, img), mustCS(t, "token", "export", "--token-id", id, img); got != want {
			t.Errorf("token %s: export %s, cryptsetup %s", id, got, want)
		}
	}
	// Imported by cryptsetup, exported by us.
	mustCS(t, "token", "import", "--token-id", "3", "--json-file", user, img)
	if got, want := mustRun(t, nil, "token", "export", "--token-id", "3", img), mustCS(t, "token", "export", "--token-id", "3", img); got != want {
		t.Errorf("token 3 (cryptsetup's): export %s, cryptsetup %s", got, want)
	}
	out := filepath.Join(dir, "out.json")
	mustRun(t, nil, "token", "export", "--token-id", "3", "--json-file", out, img)
	if b, _ := os.ReadFile(out); string(b) != mustCS(t, "token", "export", "--token-id", "3", img) {
		t.Errorf("export --json-file wrote %q", b)
	}
	// The dump's token lines are cryptsetup's.
	if got, want := tokenSectionFull(mustRun(t, nil, "dump", img)), tokenSectionFull(mustCS(t, "luksDump", img)); got != want {
		t.Errorf("dump tokens:\n%s\ncryptsetup:\n%s", got, want)
	}
	mustRun(t, nil, "token", "remove", "--token-id", "0", img)
	if code := csCode(t, "token", "export", "--token-id", "0", img); code == 0 {
		t.Errorf("cryptsetup still exports token 0 after our remove")
	}
	mustCS(t, "token", "remove", "--token-id", "7", img)
	if code, _, _ := run(t, nil, "token", "export", "--token-id", "7", img); code == 0 {
		t.Errorf("we still export token 7 after cryptsetup's remove")
	}
	for _, args := range [][]string{
		{"remove", "--token-id", "0", img},
		{"export", "--token-id", "9", img},
		{"import", "--token-id", "1", "--json-file", user, img},
		{"import", "--json-file", user, "--key-slot", "5", img},
		{"add", img},
		{"bogus", img},
	} {
		code, _, _ := run(t, nil, append([]string{"token"}, args...)...)
		if want := csCode(t, append([]string{"token"}, args...)...); code != want {
			t.Errorf("token %v: exit %d, cryptsetup %d", args, code, want)
		}
	}
	// Token JSON from stdin that cryptsetup refuses, or takes (json-c reads
	// the first value and ignores what follows); the same token results.
	for _, j := range []string{
		`not json`, `{"keyslots":[]}`, `{"type":"x"}`, `{"type":"x","keyslots":["5"]}`, `{"type":"x","keyslots":[0]}`,
		`{"type":1,"keyslots":[]}`, `[1]`, ``, `{"type":"luks2-keyring","keyslots":[]}`,
		`{"type":"x","keyslots":[]} trailing`, `  {"type":"y","keyslots":[]}{"a":1}`,
	} {
		ours, theirs := copyImage(t, img, "ours.img"), copyImage(t, img, "theirs.img")
		code, _, e := run(t, []byte(j), "token", "import", "--token-id", "20", ours)
		cmd := exec.Command("cryptsetup", "token", "import", "--token-id", "20", theirs)
		cmd.Stdin = strings.NewReader(j)
		want := 0
		if err := cmd.Run(); err != nil {
			ee, ok := err.(*exec.ExitError)
			if !ok {
				t.Fatal(err)
			}
			want = ee.ExitCode()
		}
		if code != want {
			t.Errorf("token import of %q: exit %d (%s), cryptsetup %d", j, code, strings.TrimSpace(e), want)
		}
		a, _ := cryptsetup(t, "token", "export", "--token-id", "20", ours)
		b, _ := cryptsetup(t, "token", "export", "--token-id", "20", theirs)
		if a != b {
			t.Errorf("token import of %q: cryptsetup exports %q from ours, %q from its own", j, a, b)
		}
	}
}

// tokenSectionFull is the Tokens section of a luksDump, every line.
func tokenSectionFull(dump string) string {
	i, j := strings.Index(dump, "Tokens:\n"), strings.Index(dump, "Digests:\n")
	if i < 0 || j < i {
		return ""
	}
	return dump[i:j]
}

// TestVerbsErase: after erase no keyslot opens, for cryptsetup or for us,
// and cryptsetup lists no keyslot (LUKS1 and LUKS2).
func TestVerbsErase(t *testing.T) {
	dir := t.TempDir()
	for _, typ := range []string{"luks1", "luks2"} {
		img := csFormat(t, dir, typ+".img", typ, 20<<20, "a", "b")
		for _, p := range []string{"a", "b"} {
			if csCode(t, "open", "--test-passphrase", "--key-file", writeFile(t, dir, "k", []byte(p)), img) != 0 {
				t.Fatalf("%s: passphrase %s does not open before erase", typ, p)
			}
		}
		mustRun(t, nil, "luksErase", "-q", img)
		for _, p := range []string{"a", "b"} {
			kf := writeFile(t, dir, "k", []byte(p))
			want := csCode(t, "open", "--test-passphrase", "--key-file", kf, img)
			if want == 0 {
				t.Errorf("%s: cryptsetup opens %s after erase", typ, p)
			}
			if code, _, _ := run(t, nil, "test-passphrase", "--key-file", kf, img); code != want {
				t.Errorf("%s: our test-passphrase %s after erase: exit %d, cryptsetup %d", typ, p, code, want)
			}
		}
		d := mustCS(t, "luksDump", img)
		if strings.Contains(d, "ENABLED") || strings.Contains(d, ": luks2\n") {
			t.Errorf("%s: cryptsetup still lists a keyslot:\n%s", typ, d)
		}
	}
	// With tokens assigned to the keyslots: the metadata our erase leaves
	// is the metadata cryptsetup's erase leaves (tokens unassigned, the
	// digest kept without keyslots).
	img := csFormat(t, dir, "tok.img", "luks2", 20<<20, "a", "b")
	mustCS(t, "token", "add", "--key-description", "k", img)
	mustCS(t, "token", "import", "--token-id", "4", "--json-file", writeFile(t, dir, "t.json", []byte(`{"type":"u","keyslots":["1"]}`)), img)
	ref := copyImage(t, img, "tok-ref.img")
	mustRun(t, nil, "erase", "-q", img)
	mustCS(t, "erase", "-q", ref)
	if got, want := mustCS(t, "luksDump", "--dump-json-metadata", img), mustCS(t, "luksDump", "--dump-json-metadata", ref); got != want {
		t.Errorf("metadata after our erase:\n%s\ncryptsetup's erase:\n%s", got, want)
	}
	code, _, _ := run(t, nil, "erase", "-q", writeFile(t, dir, "r", randBytes(1<<20)))
	if want := csCode(t, "erase", "-q", filepath.Join(dir, "r")); code != want {
		t.Errorf("erase of random data: exit %d, cryptsetup %d", code, want)
	}
}

// TestVerbsRepair: a LUKS2 header with one copy damaged is rewritten by
// repair so that either copy alone serves cryptsetup afterwards.
func TestVerbsRepair(t *testing.T) {
	dir := t.TempDir()
	for _, damaged := range []int64{0, 0x4000} { // primary, secondary copy
		img := csFormat(t, dir, "r.img", "luks2", 20<<20, "a")
		kf := writeFile(t, dir, "k", []byte("a"))
		orig, err := os.ReadFile(img)
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(img, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		junk := bytes.Repeat([]byte{0x5a}, 64)
		f.WriteAt(junk, damaged+4096+16) // inside the JSON area: checksum fails
		f.Close()
		mustRun(t, nil, "repair", img)
		// Damage the other copy now: only a repaired copy can still open.
		other := int64(0x4000)
		if damaged != 0 {
			other = 0
		}
		f, _ = os.OpenFile(img, os.O_RDWR, 0)
		f.WriteAt(junk, other+4096+16)
		f.Close()
		if code := csCode(t, "open", "--test-passphrase", "--key-file", kf, img); code != 0 {
			t.Errorf("copy at %#x damaged, repaired, other copy damaged: cryptsetup exit %d", damaged, code)
		}
		after, _ := os.ReadFile(img)
		if !bytes.Equal(after[1<<20:], orig[1<<20:]) {
			t.Errorf("repair changed bytes beyond the header")
		}
		os.Remove(img)
	}
}

// TestVerbsFormatDumpNames: cryptsetup's tcryptDump, bitlkDump and
// fvault2Dump are accepted and are dump with the type named: on a LUKS
// image each answers exactly as dump --type does (a refusal), not as a
// LUKS dump.
func TestVerbsFormatDumpNames(t *testing.T) {
	l2 := csFormat(t, t.TempDir(), "l2.img", "luks2", 20<<20, "a")
	for v, typ := range map[string]string{"tcryptDump": "tcrypt", "fvault2Dump": "fvault2", "bitlkDump": "bitlk"} {
		code, out, e := run(t, nil, v, l2) // no passphrase: a TCRYPT search takes a minute
		wcode, wout, we := run(t, nil, "dump", "--type", typ, l2)
		if code == 0 || code != wcode || out != wout || e != we {
			t.Errorf("%s: exit %d %q %q; dump --type %s: exit %d %q %q", v, code, out, e, typ, wcode, wout, we)
		}
	}
}

// TestVerbsConfirm: on a terminal, erase, convert and luksUUID --uuid ask
// as cryptsetup asks; anything but YES leaves the image as it was and
// exits 2, YES goes on, and -q asks nothing.
func TestVerbsConfirm(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"erase"}, {"convert", "--type", "luks1"}, {"luksUUID", "--uuid", "01234567-89ab-4cde-8f01-23456789abcd"},
	} {
		img := filepath.Join(dir, "c.img")
		os.WriteFile(img, nil, 0o600)
		os.Truncate(img, 20<<20)
		kf := writeFile(t, dir, "k", []byte("a"))
		mustCS(t, "luksFormat", "-q", "--type", "luks2", "--sector-size", "512", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", kf, img)
		before, _ := os.ReadFile(img)
		term := func(answer string, extra ...string) (int, string) {
			var out, errb bytes.Buffer
			env := &Env{Stdin: strings.NewReader(answer), Stdout: &out, Stderr: &errb, StdinIsTerminal: true}
			code := Main(context.Background(), append(append(append([]string(nil), args...), img), extra...), env)
			return code, out.String()
		}
		code, out := term("yes\n")
		after, _ := os.ReadFile(img)
		if code != 2 || !bytes.Equal(before, after) || !strings.Contains(out, "Are you sure? (Type 'yes' in capital letters): ") {
			t.Errorf("%v answered yes: exit %d, changed %v, asked %q", args, code, !bytes.Equal(before, after), out)
		}
		if code, out = term("YES\n"); code != 0 {
			t.Errorf("%v answered YES: exit %d %q", args, code, out)
		}
		after, _ = os.ReadFile(img)
		if bytes.Equal(before, after) {
			t.Errorf("%v answered YES: nothing changed", args)
		}
		os.WriteFile(img, before, 0o600)
		if code, out = term("", "-q"); code != 0 || strings.Contains(out, "Are you sure") {
			t.Errorf("%v -q: exit %d, output %q", args, code, out)
		}
	}
}

// unlockedSlot is the keyslot cryptsetup opens with the passphrase in
// file kf, or -1.
func unlockedSlot(t *testing.T, img, kf string) int {
	t.Helper()
	out, err := cryptsetup(t, "open", "--test-passphrase", "-v", "--key-file", kf, img)
	if err != nil {
		return -1
	}
	var slot int
	if i := strings.Index(out, "Key slot "); i < 0 {
		t.Fatalf("cryptsetup names no keyslot: %s", out)
	} else if _, err := fmt.Sscanf(out[i:], "Key slot %d unlocked.", &slot); err != nil {
		t.Fatalf("cryptsetup output %q: %v", out, err)
	}
	return slot
}

// TestChangeKeyLikeCryptsetup: change-key runs through the LUKS handle's
// ChangeKey and leaves the keyslots as cryptsetup's luksChangeKey leaves
// a twin image (LUKS2 keeps the keyslot number, LUKS1 takes the first
// free one), says which keyslot it created, and refuses a wrong old
// passphrase before asking for a new one, changing nothing.
func TestChangeKeyLikeCryptsetup(t *testing.T) {
	for _, typ := range []string{"luks1", "luks2"} {
		t.Run(typ, func(t *testing.T) {
			dir := t.TempDir()
			ours := csFormat(t, dir, "ours.img", typ, 20<<20, "zero", "one")
			theirs := csFormat(t, dir, "theirs.img", typ, 20<<20, "zero", "one")
			oldKF := writeFile(t, dir, "old", []byte("zero"))
			newKF := writeFile(t, dir, "new", []byte("fresh"))
			fast := []string{"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"}
			mustCS(t, append([]string{"luksChangeKey", "-q", "--key-file", oldKF, theirs, newKF}, fast...)...)
			code, _, e := run(t, nil, append([]string{"change-key", "--key-file", oldKF, ours, newKF}, fast...)...)
			if code != 0 {
				t.Fatalf("change-key: exit %d: %s", code, e)
			}
			want := unlockedSlot(t, theirs, newKF)
			if got := unlockedSlot(t, ours, newKF); got != want || want < 0 {
				t.Errorf("the new passphrase opens keyslot %d, cryptsetup's twin %d", got, want)
			}
			if !strings.Contains(e, fmt.Sprintf("Key slot %d created.", want)) {
				t.Errorf("change-key said %q, want keyslot %d", e, want)
			}
			for _, p := range []string{"zero", "one"} {
				kf := writeFile(t, dir, "p-"+p, []byte(p))
				if got, w := unlockedSlot(t, ours, kf), unlockedSlot(t, theirs, kf); got != w {
					t.Errorf("%q opens keyslot %d, in cryptsetup's twin %d", p, got, w)
				}
			}
			before, _ := os.ReadFile(ours)
			wrong := writeFile(t, dir, "wrong", []byte("nope"))
			asked := false
			var errb bytes.Buffer
			env := &Env{Stdin: strings.NewReader(""), Stdout: &bytes.Buffer{}, Stderr: &errb, StdinIsTerminal: true,
				Prompt: func(string) ([]byte, error) { asked = true; return []byte("x"), nil }}
			if code := Main(context.Background(), append([]string{"change-key", "--key-file", wrong, ours}, fast...), env); code != 2 || asked {
				t.Errorf("change-key with a wrong passphrase: exit %d (%s), asked for a new one: %v; want 2, not asked", code, errb.String(), asked)
			}
			if after, _ := os.ReadFile(ours); !bytes.Equal(before, after) {
				t.Error("a refused change-key wrote")
			}
		})
	}
}
