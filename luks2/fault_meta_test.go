package luks2_test

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/luksutil"
	"github.com/blkcrypt/blkcrypt/internal/luksutil/lukstest"
	"github.com/blkcrypt/blkcrypt/luks2"
)

// TestCrashSafetyMetadata stops the metadata-only LUKS2 updates (label and
// subsystem, keyslot priority, token add and remove, repair of a damaged
// copy) after each write in turn, whole or torn. After every crash point
// the header must load for us and for cryptsetup, both passphrases must
// open with both, and the changed property must read as before or after
// the update, the same for cryptsetup as for us.
func TestCrashSafetyMetadata(t *testing.T) {
	cs := lukstest.NeedCryptsetup(t)
	dir := t.TempDir()
	old, other := []byte("old passphrase"), []byte("other passphrase")
	base := lukstest.NewImage(t, dir, "meta.img", imgSize)
	cs.MustRun("luksFormat", "--type", "luks2", "--batch-mode", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--label", "old label", "--key-file", cs.KeyFile(old), base)
	cs.MustRun("luksAddKey", "--batch-mode", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", cs.KeyFile(old), base, cs.KeyFile(other))
	cs.MustRun("token", "import", "--token-id", "3", "--json-file", writeTemp(t, `{"type":"blkcrypt-test","keyslots":["0"]}`), base)
	// A copy whose secondary metadata is damaged, for repair.
	damaged := lukstest.CopyFile(t, base, t.TempDir())
	{
		dev := lukstest.Open(t, damaged)
		h, err := luks2.Read(dev)
		if err != nil {
			t.Fatal(err)
		}
		var b [1]byte
		dev.ReadAt(b[:], int64(h.MetadataSize())+0x1c0) // a byte of the secondary's checksum
		b[0] ^= 0xff
		dev.WriteAt(b[:], int64(h.MetadataSize())+0x1c0)
		if h, err := luks2.Read(dev); err != nil || !h.NeedsRepair() {
			t.Fatalf("damaging the secondary: %v", err)
		}
	}

	labelRe := regexp.MustCompile(`(?m)^Label:\s*(.*)$`)
	subsysRe := regexp.MustCompile(`(?m)^Subsystem:\s*(.*)$`)
	csJSON := func(img string) map[string]any {
		out := cs.MustRun("luksDump", "--dump-json-metadata", img)
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("cryptsetup JSON: %v", err)
		}
		return m
	}
	tokens := func(m map[string]any) string {
		var ids []string
		for id := range m["tokens"].(map[string]any) {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		return strings.Join(ids, ",")
	}
	type metaOp struct {
		name string
		base string
		op   func(h *luks2.Header, dev luksutil.Device) error
		// ours and theirs read the property the op changes.
		ours   func(h *luks2.Header) string
		theirs func(img string) string
	}
	ops := []metaOp{
		{"label", base, func(h *luks2.Header, dev luksutil.Device) error { return h.SetLabel(dev, "new label", "new subsystem") },
			func(h *luks2.Header) string { return h.Label() + "/" + h.Subsystem() },
			func(img string) string {
				out := cs.MustRun("luksDump", img)
				l, s := labelRe.FindStringSubmatch(out), subsysRe.FindStringSubmatch(out)
				norm := func(x string) string {
					if strings.HasPrefix(x, "(no ") {
						return ""
					}
					return x
				}
				return norm(strings.TrimSpace(l[1])) + "/" + norm(strings.TrimSpace(s[1]))
			}},
		{"priority", base, func(h *luks2.Header, dev luksutil.Device) error { return h.SetPriority(dev, 1, luks2.PriorityPrefer) },
			func(h *luks2.Header) string {
				for _, k := range h.Keyslots() {
					if k.ID == 1 && k.Priority == luks2.PriorityPrefer {
						return "prefer"
					}
				}
				return "normal"
			},
			func(img string) string {
				k := csJSON(img)["keyslots"].(map[string]any)["1"].(map[string]any)
				if p, ok := k["priority"].(float64); ok && p == 2 {
					return "prefer"
				}
				return "normal"
			}},
		{"token-add", base, func(h *luks2.Header, dev luksutil.Device) error {
			return h.SetToken(dev, 5, []byte(`{"type":"blkcrypt-test","keyslots":["1"]}`))
		}, ourTokens, func(img string) string { return tokens(csJSON(img)) }},
		{"token-remove", base, func(h *luks2.Header, dev luksutil.Device) error { return h.RemoveToken(dev, 3) },
			ourTokens, func(img string) string { return tokens(csJSON(img)) }},
		{"repair", damaged, func(h *luks2.Header, dev luksutil.Device) error { return h.Repair(dev) },
			func(h *luks2.Header) string { return fmt.Sprint("needs repair: ", h.NeedsRepair()) },
			nil},
	}
	for _, tear := range []bool{false, true} {
		for _, o := range ops {
			name := o.name
			if tear {
				name += "-torn"
			}
			t.Run(name, func(t *testing.T) {
				cs := cs.With(t)
				state := func(img string) (string, string) {
					dev := lukstest.Open(t, img)
					h, err := luks2.Read(dev)
					if err != nil {
						t.Fatalf("header unreadable: %v", err)
					}
					ours := o.ours(h)
					if o.theirs == nil {
						return ours, ""
					}
					return ours, o.theirs(img)
				}
				before, _ := state(o.base)
				done := lukstest.CopyFile(t, o.base, t.TempDir())
				{
					dev := lukstest.Open(t, done)
					h, err := luks2.Read(dev)
					if err != nil {
						t.Fatal(err)
					}
					if err := o.op(h, dev); err != nil {
						t.Fatal(err)
					}
				}
				after, _ := state(done)
				if before == after {
					t.Fatalf("the update changes nothing visible (%q)", before)
				}
				for n := 0; n < 50; n++ {
					img := lukstest.CopyFile(t, o.base, t.TempDir())
					dev := lukstest.Open(t, img)
					h, err := luks2.Read(dev)
					if err != nil {
						t.Fatal(err)
					}
					fd := &lukstest.FaultDevice{Device: dev, Limit: n, Tear: tear}
					if err := o.op(h, fd); err != nil && !fd.Failed() {
						t.Fatalf("N=%d: failed by itself: %v", n, err)
					}
					ours, theirs := state(img)
					if ours != before && ours != after {
						t.Fatalf("N=%d: we read %q, neither %q nor %q", n, ours, before, after)
					}
					if o.theirs != nil && theirs != ours {
						t.Fatalf("N=%d: cryptsetup reads %q, we read %q", n, theirs, ours)
					}
					for _, p := range [][]byte{old, other} {
						if !opensAfterCrash(t, img, p) || !cs.TestPassphrase(img, p, -1) {
							t.Fatalf("N=%d: %q no longer opens", n, p)
						}
					}
					os.Remove(img)
					if !fd.Failed() {
						if ours != after {
							t.Fatalf("completed, but reads %q", ours)
						}
						t.Logf("%d writes; every crash point reads %q or %q", fd.Writes, before, after)
						return
					}
				}
				t.Fatal("the update never completed")
			})
		}
	}
}

func ourTokens(h *luks2.Header) string {
	var ids []string
	for id := range h.Tokens() {
		ids = append(ids, fmt.Sprint(id))
	}
	sort.Strings(ids)
	return strings.Join(ids, ",")
}

func writeTemp(t *testing.T, s string) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString(s)
	return f.Name()
}
