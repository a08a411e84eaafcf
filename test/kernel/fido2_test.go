//go:build linux

package kernel

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/fido2test"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
	"github.com/blkcrypt/blkcrypt/token"
)

// fido2Script is the guest's part of TestFIDO2Guest. Lines the host reads:
//
//	@@SUM NAME RC HEX   a step that opens a volume: its exit status and
//	                    the SHA-256 of the first @LEN@ bytes of the mapping
//	@@RC NAME N         a step's exit status or count
//	@@S …               diagnostics
const fido2Script = `
export SYSTEMD_LOG_LEVEL=debug SYSTEMD_LOG_TARGET=console
mkdir -p /run/systemd /run/cryptsetup /var/tmp
kt_sum() {
	if [ -e /dev/mapper/$1 ]; then
		s=$(dd if=/dev/mapper/$1 bs=@LEN@ count=1 2>/dev/null | sha256sum | cut -d' ' -f1)
	else
		s=none
	fi
	echo "@@SUM $1 $2 $s"
	[ -e /dev/mapper/$1 ] && cryptsetup close $1
}
kt_diag() { [ "$2" = 0 ] || grep -v "Requesting JSON" /tmp/$1.log | sed "s/^/@@S $1: /" | tail -n 40; }
# kt_attach NAME DISK: systemd-cryptsetup attach, as crypttab's
# "NAME DISK - fido2-device=auto,headless=true" would.
kt_attach() {
	timeout 120 /lib/systemd/systemd-cryptsetup attach $1 /dev/disk/$2 - fido2-device=auto,headless=true >/tmp/$1.log 2>&1
	rc=$?
	kt_diag $1 $rc
	kt_sum $1 $rc
}
# kt_blk NAME DISK: blkcrypt's own client through /dev/hidrawN gives the
# passphrase; cryptsetup opens the keyslot with it.
kt_blk() {
	/kt/fido2guest unlock /dev/disk/$2 >/tmp/$1.pass 2>/tmp/$1.log
	rc=$?
	kt_diag $1 $rc
	[ $rc = 0 ] && cryptsetup open --key-file /tmp/$1.pass /dev/disk/$2 $1 >>/tmp/$1.log 2>&1
	kt_sum $1 $rc
}
# kt_cli NAME DISK [FLAGS]: the blkcrypt command alone opens DISK by its
# FIDO2 token (read --token-only --fido2-device auto).
kt_cli() {
	n=$1 d=$2
	shift 2
	/kt/blkcrypt read --token-only --fido2-device auto --length @LEN@ -o /tmp/$n.out "$@" /dev/disk/$d >/tmp/$n.log 2>&1 </dev/null
	rc=$?
	kt_diag $n $rc
	if [ $rc = 0 ]; then s=$(sha256sum </tmp/$n.out | cut -d' ' -f1); else s=none; fi
	echo "@@SUM $n $rc $s"
}
# kt_key [PIN [PROTOCOLS]]: the software security key behind /dev/uhid.
kt_key() {
	/kt/fido2guest uhid @SEED@ $1 $2 >/tmp/uhid.log 2>&1 &
	upid=$!
	i=0
	while [ -z "$(ls /sys/class/hidraw 2>/dev/null)" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
	echo "@@RC hidraw$1$2 $(ls /sys/class/hidraw 2>/dev/null | wc -l)"
	sed "s/^/@@S uhid: /" /tmp/uhid.log
}
kt_unkey() {
	kill $upid; wait $upid 2>/dev/null
	i=0
	while [ -n "$(ls /sys/class/hidraw 2>/dev/null)" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
}

kt_key
# 1. systemd-cryptenroll enrolls the key (no PIN; a touch, which the
#    software key always gives); the host opens it later. blkcrypt's
#    hidraw client opens it here.
timeout 120 systemd-cryptenroll --unlock-key-file=/kt/key --fido2-device=auto --fido2-with-client-pin=no /dev/disk/sd >/tmp/enroll.log 2>&1
rc=$?
echo "@@RC enroll $rc"
kt_diag enroll $rc
kt_blk bkSD sd
kt_cli cliSD sd
# blkcrypt enroll (the command) with the key, no PIN; cryptsetup's
# systemd-fido2 plugin opens what it wrote.
/kt/blkcrypt enroll --unlock-key-file=/kt/key --fido2-device=auto --fido2-with-client-pin=no /dev/disk/cli >/tmp/clienroll.log 2>&1 </dev/null
rc=$?
echo "@@RC clienroll $rc"
kt_diag clienroll $rc
timeout 120 cryptsetup open --token-only /dev/disk/cli csCLI >/tmp/csCLI.log 2>&1
rc=$?
kt_diag csCLI $rc
kt_sum csCLI $rc
# 2. blkcrypt's token (enrolled on the host): systemd-cryptsetup (through
#    the systemd-fido2 token plugin) and cryptsetup's plugin open it.
kt_attach sdBK bk
timeout 120 cryptsetup open --token-only /dev/disk/bk csBK >/tmp/csBK.log 2>&1
rc=$?
kt_diag csBK $rc
kt_sum csBK $rc
kt_unkey

# 3. The same key with a PIN: blkcrypt's PIN token opens with $PIN, a
#    wrong one is refused; the plugin takes the PIN on stdin.
kt_key @PIN@
PIN=@PIN@ kt_attach sdBKPIN bkpin
PIN=0000 kt_attach sdBKPINwrong bkpin
printf %s @PIN@ | timeout 120 cryptsetup open --token-only /dev/disk/bkpin csBKPIN >/tmp/csBKPIN.log 2>&1
rc=$?
kt_diag csBKPIN $rc
kt_sum csBKPIN $rc
PIN=@PIN@ kt_blk bkBKPIN bkpin
# systemd-cryptenroll with --fido2-with-client-pin=yes (its default).
# systemd 252 reads no $PIN here: the PIN goes where its ask-password
# looks first, the kernel keyring's "fido2-pin".
/kt/fido2guest cache-pin @PIN@ || echo "@@S cache-pin failed"
timeout 120 systemd-cryptenroll --unlock-key-file=/kt/key --fido2-device=auto --fido2-with-client-pin=yes /dev/disk/sdpin >/tmp/enrollpin.log 2>&1 </dev/null
rc=$?
echo "@@RC enrollpin $rc"
kt_diag enrollpin $rc
# The command with the PIN: blkcrypt enroll (PIN from a file, required by
# default) judged by systemd-cryptsetup; blkcrypt read of systemd's PIN
# token, with the PIN file and without (no terminal: refused).
/kt/blkcrypt enroll --unlock-key-file=/kt/key --fido2-device=auto --fido2-pin-file=/kt/pin /dev/disk/clipin >/tmp/clienrollpin.log 2>&1 </dev/null
rc=$?
echo "@@RC clienrollpin $rc"
kt_diag clienrollpin $rc
PIN=@PIN@ kt_attach sdCLIPIN clipin
kt_cli cliSDPIN sdpin --fido2-pin-file=/kt/pin
kt_cli cliSDPINnone sdpin
kt_unkey

# 4. The same key speaking PIN/UV auth protocol 2 only (CTAP 2.1's HKDF
#    keys, random IVs, whole HMACs): libfido2 must use it, so what opens
#    proves both sides speak it. systemd-cryptenroll enrolls (PIN from the
#    keyring), blkcrypt's hidraw client opens that; systemd-cryptsetup
#    opens blkcrypt's PIN token (enrolled over protocol 1: the secret does
#    not depend on the protocol).
kt_key @PIN@ 2
timeout 120 systemd-cryptenroll --unlock-key-file=/kt/key --fido2-device=auto --fido2-with-client-pin=yes /dev/disk/sdpin2 >/tmp/enrollpin2.log 2>&1 </dev/null
rc=$?
echo "@@RC enrollpin2 $rc"
kt_diag enrollpin2 $rc
PIN=@PIN@ kt_blk bkSDPIN2 sdpin2
PIN=@PIN@ kt_attach sdBKPIN2 bkpin
kt_unkey
exit 0
`

// TestFIDO2Guest is issue #28's FIDO2 acceptance, both ways, with one
// boot. The guest runs internal/fido2test's software security key behind
// /dev/uhid; the host talks to a key with the same seed (the same
// credentials) over an in-memory transport.
//
//  1. In the guest, Debian's systemd-cryptenroll --fido2-device=auto
//     enrolls a volume through libfido2 and the kernel's hidraw; there
//     blkcrypt's own client, through /dev/hidrawN, derives the passphrase
//     with which cryptsetup opens it; after the boot the host's
//     token.Unlock does too, and blkcrypt reads the plaintext.
//  2. On the host token.EnrollFIDO2 enrolls two volumes (no PIN; PIN); in
//     the guest systemd-cryptsetup attach (fido2-device=auto, $PIN) and
//     cryptsetup open --token-only (the systemd-fido2 token plugin)
//     open them, and dm-crypt reads the plaintext; a wrong PIN is
//     refused. The token systemd-cryptenroll wrote has the fields, in
//     the order, EnrollFIDO2 writes.
//  3. systemd-cryptenroll --fido2-with-client-pin=yes (the PIN from the
//     kernel keyring, where systemd 252's ask-password looks first), with
//     the key speaking PIN protocol 1 and then only protocol 2; blkcrypt
//     opens both on the host, and with its hidraw client in the guest.
func TestFIDO2Guest(t *testing.T) {
	k := need(t)
	cs := testenv.Need(t, "cryptsetup", "cryptsetup-bin")
	testenv.Need(t, "systemd-cryptenroll", "systemd")
	const sdCryptsetup = "/lib/systemd/systemd-cryptsetup"
	const plugin = "/usr/lib/x86_64-linux-gnu/cryptsetup/libcryptsetup-token-systemd-fido2.so"
	const libfido2 = "/usr/lib/x86_64-linux-gnu/libfido2.so.1"
	for _, p := range []string{sdCryptsetup, plugin} {
		if _, err := os.Stat(p); err != nil {
			testenv.Missing(t, "%s (apt package systemd): %v", p, err)
		}
	}
	if _, err := os.Stat(libfido2); err != nil {
		testenv.Missing(t, "%s (apt package libfido2-1): %v", libfido2, err)
	}
	dir := t.TempDir()
	cli := filepath.Join(dir, "blkcrypt")
	goBuild(t, "../../cmd/blkcrypt", cli, false)
	guest := filepath.Join(dir, "fido2guest")
	goBuild(t, "./guest/fido2guest", guest, false)

	const plainLen = 65536
	const seed = "kernel fido2 seed"
	const pin = "314159"
	pass := []byte("kernel fido2 passphrase")
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, pass, 0o600); err != nil {
		t.Fatal(err)
	}
	plain := map[string][]byte{}
	imgs := map[string]string{}
	names := []string{"sd", "sdpin", "sdpin2", "bk", "bkpin", "cli", "clipin"}
	for _, name := range names {
		img := filepath.Join(dir, name+".img")
		if err := os.WriteFile(img, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(img, 16<<20); err != nil {
			t.Fatal(err)
		}
		mustTPMTool(t, nil, cs, "luksFormat", "-q", "--type", "luks2", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--offset", "8192",
			"--key-file", keyFile, img)
		data := make([]byte, plainLen)
		rand.Read(data)
		in := filepath.Join(dir, name+".plain")
		if err := os.WriteFile(in, data, 0o600); err != nil {
			t.Fatal(err)
		}
		mustTPMTool(t, nil, cli, "write", "--key-file", keyFile, "--input", in, img)
		plain[name], imgs[name] = data, img
	}

	// Host: blkcrypt enrolls with the key over the in-memory transport.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	enroll := func(name, pin string) []byte {
		t.Helper()
		h, err := blkcrypt.OpenLUKS(ctx, imgs[name], blkcrypt.LUKSOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		var p []byte
		if pin != "" {
			p = []byte(pin)
		}
		_, id, err := token.EnrollFIDO2(ctx, h, token.FIDO2EnrollOptions{EnrollOptions: token.EnrollOptions{Existing: pass},
			Transport: &fido2test.Pipe{A: fido2test.New([]byte(seed), pin)}, PIN: p, UP: true, VolumeName: imgs[name]})
		if err != nil {
			t.Fatalf("EnrollFIDO2 %s: %v", name, err)
		}
		js, err := h.ExportToken(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	ourToken := enroll("bk", "")
	enroll("bkpin", pin)

	script := strings.NewReplacer("@LEN@", strconv.Itoa(plainLen), "@SEED@", strconv.Quote(seed), "@PIN@", pin).Replace(fido2Script)
	files := map[string][]byte{"/kt/key": pass, "/kt/pin": []byte(pin + "\n")}
	guestLibs(t, files, plugin, libfido2)
	// libcryptsetup looks for token plugins next to itself, which is
	// /lib/x86_64-linux-gnu in the guest (no merged /usr there).
	files["/lib/x86_64-linux-gnu/cryptsetup/"+filepath.Base(plugin)] = files[plugin]
	var disks []Disk
	for _, n := range names {
		disks = append(disks, Disk{Name: n, Path: imgs[n]})
	}
	res := run(t, k, Boot{
		Script:      script,
		Files:       files,
		Executables: map[string]string{"/kt/fido2guest": guest, "/kt/blkcrypt": cli},
		Programs:    []string{sdCryptsetup, "systemd-cryptenroll", "timeout"},
		Disks:       disks,
		Timeout:     6 * time.Minute,
	})
	defer func() {
		if t.Failed() {
			t.Logf("guest output:\n%s", res.Output)
		}
	}()
	if res.ExitCode != 0 {
		t.Fatalf("guest script exit %d", res.ExitCode)
	}
	one := func(prefix string) string {
		t.Helper()
		l := res.Lines(prefix)
		if len(l) != 1 {
			t.Fatalf("guest printed %d %q lines, want 1", len(l), prefix)
		}
		return l[0]
	}
	for _, p := range []string{"@@RC hidraw ", "@@RC hidraw" + pin + " ", "@@RC hidraw" + pin + "2 "} {
		if n := one(p); n != "1" {
			t.Fatalf("%s: %s hidraw devices in the guest, want 1 (the uhid key)", p, n)
		}
	}
	sum := func(name string) (string, string) {
		t.Helper()
		f := strings.Fields(one("@@SUM " + name + " "))
		if len(f) != 2 {
			t.Fatalf("bad @@SUM %s line: %q", name, f)
		}
		return f[0], f[1]
	}
	opens := func(name, img, what string) {
		t.Helper()
		rc, s := sum(name)
		want := sha256.Sum256(plain[img])
		if rc != "0" || s != hex.EncodeToString(want[:]) {
			t.Errorf("%s: exit %s, dm-crypt read %s, want the plaintext blkcrypt wrote (%x)", what, rc, s, want)
		}
	}
	if rc := one("@@RC enroll "); rc != "0" {
		t.Fatalf("systemd-cryptenroll --fido2-device=auto in the guest exited %s", rc)
	}
	opens("bkSD", "sd", "blkcrypt's hidraw client on systemd-cryptenroll's token, then cryptsetup")
	opens("cliSD", "sd", "blkcrypt read --token-only --fido2-device auto of systemd-cryptenroll's token")
	if rc := one("@@RC clienroll "); rc != "0" {
		t.Errorf("blkcrypt enroll --fido2-device=auto --fido2-with-client-pin=no in the guest exited %s", rc)
	}
	opens("csCLI", "cli", "cryptsetup open --token-only (systemd-fido2 plugin) of blkcrypt enroll --fido2-device's token")
	if rc := one("@@RC clienrollpin "); rc != "0" {
		t.Errorf("blkcrypt enroll --fido2-device=auto --fido2-pin-file in the guest exited %s", rc)
	}
	opens("sdCLIPIN", "clipin", "systemd-cryptsetup attach with $PIN of blkcrypt enroll's FIDO2+PIN token")
	if one("@@RC enrollpin ") == "0" {
		opens("cliSDPIN", "sdpin", "blkcrypt read --token-only --fido2-pin-file of systemd-cryptenroll's FIDO2+PIN token")
		if rc, s := sum("cliSDPINnone"); rc == "0" || s != "none" {
			t.Errorf("blkcrypt read --token-only of a FIDO2+PIN token with no PIN and no terminal: exit %s; want a refusal", rc)
		}
	}
	// What the command enrolled says what its flags asked for.
	for name, wantPIN := range map[string]bool{"cli": false, "clipin": true} {
		h, err := blkcrypt.OpenLUKS(ctx, imgs[name], blkcrypt.LUKSOptions{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		toks, err := h.Tokens(ctx)
		h.Close()
		if err != nil || len(toks) != 1 {
			t.Errorf("%s: tokens %d (%v), want the one blkcrypt enroll wrote", name, len(toks), err)
			continue
		}
		for _, js := range toks {
			if tok, err := token.ParseFIDO2Token(js); err != nil || tok.ClientPIN != wantPIN || !tok.UP {
				t.Errorf("%s: blkcrypt enroll wrote %s (%v); want the PIN required %v and a touch", name, js, err, wantPIN)
			}
		}
	}
	opens("sdBK", "bk", "systemd-cryptsetup attach of blkcrypt's FIDO2 token")
	opens("csBK", "bk", "cryptsetup open --token-only (systemd-fido2 plugin) of blkcrypt's FIDO2 token")
	opens("sdBKPIN", "bkpin", "systemd-cryptsetup attach of blkcrypt's FIDO2+PIN token with $PIN")
	if rc, s := sum("sdBKPINwrong"); rc == "0" || s != "none" {
		t.Errorf("systemd-cryptsetup attach with a wrong $PIN: exit %s, mapping %s; want a refusal", rc, s)
	}
	opens("csBKPIN", "bkpin", "cryptsetup open --token-only (plugin, PIN on stdin) of blkcrypt's FIDO2+PIN token")
	opens("bkBKPIN", "bkpin", "blkcrypt's hidraw client with $PIN on its own FIDO2+PIN token, then cryptsetup")
	if rc := one("@@RC enrollpin2 "); rc != "0" {
		t.Fatalf("systemd-cryptenroll --fido2-with-client-pin=yes with a PIN protocol 2 key exited %s", rc)
	}
	opens("bkSDPIN2", "sdpin2", "blkcrypt's hidraw client (PIN protocol 2) on systemd-cryptenroll's protocol 2 token")
	opens("sdBKPIN2", "bkpin", "systemd-cryptsetup attach (PIN protocol 2) of blkcrypt's FIDO2+PIN token")

	// Host: what systemd-cryptenroll enrolled opens with blkcrypt, and
	// its token has our fields in our order.
	hostOpens := func(name, pin string, protocols ...int) {
		t.Helper()
		h, err := blkcrypt.OpenLUKS(ctx, imgs[name], blkcrypt.LUKSOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		key := fido2test.New([]byte(seed), pin)
		if protocols != nil {
			key.Protocols = protocols
		}
		o := token.Options{FIDO2Transport: &fido2test.Pipe{A: key}}
		if pin != "" {
			o.PIN = []byte(pin)
		}
		p, id, err := token.Unlock(ctx, h, o)
		if err != nil {
			t.Errorf("token.Unlock of the volume systemd-cryptenroll enrolled (%s): %v", name, err)
			return
		}
		js, _ := h.ExportToken(ctx, id)
		if a, b := jsonKeys(t, js), jsonKeys(t, ourToken); !slices.Equal(a, b) {
			t.Errorf("systemd-cryptenroll's token has fields %v, EnrollFIDO2's %v", a, b)
		}
		pf := filepath.Join(dir, name+".pass")
		if err := os.WriteFile(pf, p, 0o600); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, name+".read")
		mustTPMTool(t, nil, cli, "read", "--key-file", pf, "--length", strconv.Itoa(plainLen), "-o", out, imgs[name])
		if got, _ := os.ReadFile(out); !bytes.Equal(got, plain[name]) {
			t.Errorf("blkcrypt read with the FIDO2 passphrase of %s gave %d bytes, not the plaintext", name, len(got))
		}
	}
	hostOpens("sd", "")
	if rc := one("@@RC enrollpin "); rc != "0" {
		t.Errorf("systemd-cryptenroll --fido2-with-client-pin=yes (PIN in the keyring) in the guest exited %s", rc)
	} else {
		hostOpens("sdpin", pin)
	}
	hostOpens("sdpin2", pin, 2)
}

// jsonKeys returns a JSON object's keys in their written order.
func jsonKeys(t *testing.T, js []byte) []string {
	t.Helper()
	var keys []string
	s := string(js)
	depth := 0
	inStr := false
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inStr && c == '\\':
			i++
		case c == '"':
			if !inStr {
				start = i + 1
			} else if depth == 1 && i+1 < len(s) && s[i+1] == ':' {
				keys = append(keys, s[start:i])
			}
			inStr = !inStr
		case !inStr && (c == '{' || c == '['):
			depth++
		case !inStr && (c == '}' || c == ']'):
			depth--
		}
	}
	return keys
}
