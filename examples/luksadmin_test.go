package examples

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestLuksadmin runs every header verb of the luksadmin program (the
// public API alone) over an image file and over the same image held in
// memory, LUKS1 and LUKS2, and has cryptsetup judge each result: which
// keyslot each passphrase opens, the UUID, label, priorities, tokens, the
// header backup's bytes, the JSON metadata, the dumps, a conversion and a
// restore.
func TestLuksadmin(t *testing.T) {
	cs := need(t, "cryptsetup", "cryptsetup-bin")
	bin := buildProgram(t, "luksadmin")
	for _, typ := range []string{"luks1", "luks2"} {
		for _, mem := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/mem=%v", typ, mem), func(t *testing.T) {
				dir := t.TempDir()
				img := filepath.Join(dir, "v.img")
				if err := os.WriteFile(img, make([]byte, 20<<20), 0o600); err != nil {
					t.Fatal(err)
				}
				admin := func(stdin string, args ...string) string {
					t.Helper()
					a := []string{"-type", typ}
					if mem {
						a = append(a, "-mem")
					}
					cmd := exec.Command(bin, append(append(a, img), args...)...)
					cmd.Stdin = strings.NewReader(stdin)
					var out, errb bytes.Buffer
					cmd.Stdout, cmd.Stderr = &out, &errb
					if err := cmd.Run(); err != nil {
						t.Fatalf("luksadmin %v: %v\n%s", args, err, errb.String())
					}
					return strings.TrimSpace(out.String())
				}
				crypt := func(stdin string, args ...string) (string, int) {
					t.Helper()
					cmd := exec.Command(cs, args...)
					cmd.Stdin = strings.NewReader(stdin)
					out, err := cmd.CombinedOutput()
					if ee, ok := err.(*exec.ExitError); ok {
						return string(out), ee.ExitCode()
					} else if err != nil {
						t.Fatal(err)
					}
					return string(out), 0
				}
				// opens reports whether cryptsetup opens the image with pass
				// in slot (any when slot < 0).
				opens := func(pass string, slot int) bool {
					t.Helper()
					args := []string{"open", "--test-passphrase", "--key-file", "-", img}
					if slot >= 0 {
						args = append(args, "--key-slot", fmt.Sprint(slot))
					}
					out, code := crypt(pass, args...)
					if code != 0 && code != 2 && !strings.Contains(out, "No usable keyslot") {
						t.Fatalf("cryptsetup %v: exit %d\n%s", args, code, out)
					}
					return code == 0
				}
				want := func(what string, got, want any) {
					t.Helper()
					if !reflect.DeepEqual(got, want) {
						t.Errorf("%s: %v, want %v", what, got, want)
					}
				}

				// 512-byte sectors, so that LUKS2 converts to LUKS1.
				admin("zero\n", "format", "512")
				dump, _ := crypt("", "luksDump", img)
				want("cryptsetup sees the version", strings.Contains(dump, "Version:       \t"+typ[4:]) || strings.Contains(dump, "Version:        "+typ[4:]) || regexp.MustCompile(`Version:\s+`+typ[4:]).MatchString(dump), true)
				want("keyslot 0 opens", opens("zero", 0), true)

				want("add-key", admin("zero\none\n", "add-key"), "1")
				want("add-key into 5", admin("one\nfive\n", "add-key", "5"), "5")
				want("five opens keyslot 5", opens("five", 5), true)
				changed := map[string]string{"luks1": "2", "luks2": "1"}[typ] // cryptsetup's luksChangeKey
				want("change-key", admin("one\nuno\n", "change-key"), changed)
				want("the old passphrase is gone", opens("one", -1), false)
				want("the new one opens", opens("uno", int(changed[0]-'0')), true)
				want("remove-key", admin("five\n", "remove-key"), "5")
				want("a removed passphrase", opens("five", -1), false)
				want("test", admin("uno\n", "test"), changed)

				const uuid = "12345678-1234-1234-1234-123456789abc"
				want("uuid", admin("", "uuid", uuid), uuid)
				got, _ := crypt("", "luksUUID", img)
				want("cryptsetup's luksUUID", strings.TrimSpace(got), uuid)

				// The header backup, byte for byte as cryptsetup's.
				ours, theirs := filepath.Join(dir, "ours.bak"), filepath.Join(dir, "theirs.bak")
				admin("", "backup", ours)
				if out, code := crypt("", "luksHeaderBackup", img, "--header-backup-file", theirs); code != 0 {
					t.Fatalf("luksHeaderBackup: %s", out)
				}
				a, _ := os.ReadFile(ours)
				b, _ := os.ReadFile(theirs)
				want("header backup equals cryptsetup's", bytes.Equal(a, b), true)
				dumpBefore, _ := crypt("", "luksDump", img)

				// The text dump, as cryptsetup prints it.
				want("dump", admin("", "dump"), strings.TrimSpace(dumpBefore))

				if typ == "luks2" {
					admin("", "label", "mylabel", "mysub")
					dump, _ = crypt("", "luksDump", img)
					want("label and subsystem", regexp.MustCompile(`Label:\s+mylabel\n`).MatchString(dump) && regexp.MustCompile(`Subsystem:\s+mysub\n`).MatchString(dump), true)
					admin("", "priority", changed, "prefer")
					dump, _ = crypt("", "luksDump", img)
					want("priority", regexp.MustCompile(`(?s)\n  `+changed+`: luks2\n[^\n]*\n(\t[^\n]*\n)*?\tPriority:\s+preferred\n`).MatchString(dump), true)

					// A token we import, as cryptsetup exports it; one cryptsetup
					// imports, as we export it.
					tok := `{"type":"example","keyslots":[],"x":"y"}`
					want("token-import", admin(tok, "token-import", changed), "0")
					out, _ := crypt("", "token", "export", "--token-id", "0", img)
					var g, w map[string]any
					json.Unmarshal([]byte(out), &g)
					json.Unmarshal([]byte(`{"type":"example","keyslots":["`+changed+`"],"x":"y"}`), &w)
					want("cryptsetup exports our token", g, w)
					tf := filepath.Join(dir, "tok.json")
					os.WriteFile(tf, []byte(`{"type":"other","keyslots":[]}`), 0o600)
					if out, code := crypt("", "token", "import", "--json-file", tf, "--key-slot", changed, img); code != 0 {
						t.Fatalf("token import: %s", out)
					}
					out, _ = crypt("", "token", "export", "--token-id", "1", img)
					want("we export cryptsetup's token", admin("", "token-export", "1"), strings.TrimSpace(out))
					list := admin("", "token-list")
					want("token-list", strings.Count(list, "\n")+1, 2)
					admin("", "token-remove", "0")
					_, code := crypt("", "token", "export", "--token-id", "0", img)
					want("a removed token is gone for cryptsetup", code != 0, true)

					// The JSON metadata, exactly as cryptsetup prints it.
					js, _ := crypt("", "luksDump", "--dump-json-metadata", img)
					want("dump-json", admin("", "dump-json"), strings.TrimSpace(js))

					// Convert to LUKS1 and back: cryptsetup reads both. A token
					// would be refused (as cryptsetup refuses it): drop it first.
					admin("", "token-remove", "1")
					admin("", "convert", "luks1")
					dump, _ = crypt("", "luksDump", img)
					want("converted to LUKS1", regexp.MustCompile(`Version:\s+1\n`).MatchString(dump), true)
					want("uno opens the LUKS1 header", opens("uno", -1), true)
					admin("", "convert", "luks2")
					dump, _ = crypt("", "luksDump", img)
					want("converted back to LUKS2", regexp.MustCompile(`Version:\s+2\n`).MatchString(dump), true)
				}

				// The volume key dump, as luksDump --dump-volume-key.
				vk, _ := crypt("uno", "luksDump", "--dump-volume-key", "-q", "--key-file", "-", img)
				want("volume-key", admin("uno\n", "volume-key"), strings.TrimSpace(vk))

				admin("", "kill-slot", "0")
				want("a killed keyslot", opens("zero", -1), false)

				// Restore the backup taken above: cryptsetup sees that header.
				admin("", "restore", ours)
				dump, _ = crypt("", "luksDump", img)
				want("restored header", dump, dumpBefore)
				want("zero opens again after the restore", opens("zero", 0), true)

				if !mem {
					admin("", "resize", fmt.Sprint(24<<20))
					st, _ := os.Stat(img)
					off := map[string]int64{"luks1": 2 << 20, "luks2": 16 << 20}[typ]
					want("resized file", st.Size(), off+24<<20)
					want("zero opens the resized volume", opens("zero", 0), true)
				}

				admin("", "erase")
				want("no keyslot after erase", opens("uno", -1) || opens("zero", -1), false)
				if _, code := crypt("", "isLuks", img); code != 0 {
					t.Error("erase removed the header, not just the keyslots")
				}
			})
		}
	}
}
