//go:build linux

package kernel

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/internal/swtpmtest"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// seabiosPCR7Event is the one digest SeaBIOS extends into PCR 7 (sha256
// bank) before it boots the guest's kernel: the separator event, SHA-256
// of the four bytes ff ff ff ff. The host extends the swtpm's PCR 7 with
// it so that a policy it signs for PCR 7 holds in the guest, whose PCR 7
// the test checks against the host's.
const seabiosPCR7Event = "ad95131bc0b799c0b1af477fb14fcf26a6a9f76079e48bf090acb7e8367bfd0e"

// tpmTool runs a host tool and returns its combined output.
func tpmTool(env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mustTPMTool(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	out, err := tpmTool(env, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v: %s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return out
}

// guestLibs adds to files the shared libraries that guest programs
// dlopen, with what they need as ldd lists it, at their host paths.
func guestLibs(t *testing.T, files map[string][]byte, libs ...string) {
	t.Helper()
	for _, l := range libs {
		if _, err := os.Stat(l); err != nil {
			testenv.Missing(t, "%s (apt package tpm2-tools or systemd): %v", l, err)
		}
		out, err := exec.Command("ldd", l).Output()
		if err != nil {
			t.Fatalf("ldd %s: %v", l, err)
		}
		paths := []string{l}
		for _, line := range strings.Split(string(out), "\n") {
			line = strings.TrimSpace(line)
			if _, r, ok := strings.Cut(line, "=> "); ok {
				line = r
			}
			if strings.HasPrefix(line, "/") {
				paths = append(paths, strings.Fields(line)[0])
			} else if strings.Contains(line, "not found") {
				t.Fatalf("ldd %s: %s", l, line)
			}
		}
		for _, p := range paths {
			if _, ok := files[p]; ok {
				continue
			}
			real, err := filepath.EvalSymlinks(p)
			if err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(real)
			if err != nil {
				t.Fatal(err)
			}
			files[p] = data
		}
	}
}

// tpmScript is the guest's part of TestTPMGuest. Lines the host reads:
//
//	@@PCR7 HEX           PCR 7 (sha256) as the guest's kernel reads it
//	@@SUM NAME RC HEX    a step that opens a volume: its exit status and
//	                     the SHA-256 of the first @LEN@ bytes of the mapping
//	@@RC NAME N          a step's exit status or count
//	@@PCR7X HEX          PCR 7 after the guest extended it
//	@@S …                diagnostics
const tpmScript = `
export SYSTEMD_LOG_LEVEL=debug SYSTEMD_LOG_TARGET=console
export TPM2TOOLS_TCTI=device:/dev/tpmrm0
mkdir -p /run/systemd /run/cryptsetup /var/tmp
echo "@@PCR7 $(cat /sys/class/tpm/tpm0/pcr-sha256/7)"
# kt_sum NAME: the first bytes of /dev/mapper/NAME, then close it.
kt_sum() {
	if [ -e /dev/mapper/$1 ]; then
		s=$(dd if=/dev/mapper/$1 bs=@LEN@ count=1 2>/dev/null | sha256sum | cut -d' ' -f1)
	else
		s=none
	fi
	echo "@@SUM $1 $2 $s"
	[ -e /dev/mapper/$1 ] && cryptsetup close $1
}
# kt_attach NAME DISK: systemd-cryptsetup attach, as crypttab's
# "NAME DISK - tpm2-device=auto,headless=true" would.
kt_attach() {
	/lib/systemd/systemd-cryptsetup attach $1 /dev/disk/$2 - tpm2-device=auto,headless=true >/tmp/$1.log 2>&1
	rc=$?
	[ $rc = 0 ] || grep -v "Requesting JSON" /tmp/$1.log | sed "s/^/@@S $1: /" | head -n 60
	kt_sum $1 $rc
}

# 1. blkcrypt enroll's tokens (made on the host) unlock with systemd-cryptsetup.
kt_attach sdA plain
PIN=@PIN@ kt_attach sdB pin
PIN=wrong-pin kt_attach sdBwrong pin
# ... and with libcryptsetup's systemd-tpm2 token plugin (the PIN on stdin).
cryptsetup open --token-only /dev/disk/plain csA >/tmp/csA.log 2>&1
rc=$?
[ $rc = 0 ] || sed "s/^/@@S csA: /" /tmp/csA.log
kt_sum csA $rc
printf %s @PIN@ | cryptsetup open --token-only /dev/disk/pin csB >/tmp/csB.log 2>&1
rc=$?
[ $rc = 0 ] || sed "s/^/@@S csB: /" /tmp/csB.log
kt_sum csB $rc
# Told not to use token plugins (and without the plugin), systemd-cryptsetup
# unseals with its own TPM2 code.
mv /lib/x86_64-linux-gnu/cryptsetup /lib/x86_64-linux-gnu/cryptsetup.off
export SYSTEMD_CRYPTSETUP_USE_TOKEN_MODULE=0
kt_attach sdAbuiltin plain
PIN=@PIN@ kt_attach sdBbuiltin pin
PIN=wrong-pin kt_attach sdBbuiltinwrong pin
unset SYSTEMD_CRYPTSETUP_USE_TOKEN_MODULE
echo "@@RC builtin-plugin-loads $(cat /tmp/sdAbuiltin.log /tmp/sdBbuiltin.log | grep -c 'Token handler systemd-tpm2')"
mv /lib/x86_64-linux-gnu/cryptsetup.off /lib/x86_64-linux-gnu/cryptsetup
echo "@@RC plugin-loads $(cat /tmp/sdA.log /tmp/sdB.log | grep -c 'Token handler systemd-tpm2')"

# 2. systemd-cryptenroll enrolls the third volume; the host opens it later.
systemd-cryptenroll --unlock-key-file=/kt/key --tpm2-device=auto --tpm2-pcrs=7 /dev/disk/guest >/tmp/enroll.log 2>&1
rc=$?
echo "@@RC enroll $rc"
[ $rc = 0 ] || sed "s/^/@@S enroll: /" /tmp/enroll.log | tail -n 15
kt_attach sdC guest

# 3. PCR 7 changes: systemd-cryptsetup and the plugin refuse.
tpm2_pcrextend 7:sha256=@EXTEND@ >/tmp/ext.log 2>&1 || sed "s/^/@@S pcrextend: /" /tmp/ext.log
echo "@@PCR7X $(cat /sys/class/tpm/tpm0/pcr-sha256/7)"
kt_attach sdA2 plain
cryptsetup open --token-only /dev/disk/plain csA2 >/tmp/csA2.log 2>&1
kt_sum csA2 $?
exit 0
`

// TestTPMGuest is issue #28's "unlocks in the qemu guest with a vTPM":
// one boot whose TPM is a swtpm on the host, the same TPM (state
// directory) that blkcrypt enrolls against on the host before the boot
// and opens with after it.
//
//  1. blkcrypt enroll --tpm2-pcrs 7, with and without --tpm2-with-pin,
//     on the host; in the guest Debian's systemd-cryptsetup attach
//     (tpm2-device=auto, the PIN in $PIN), both through the systemd-tpm2
//     token plugin and with its own TPM2 code
//     (SYSTEMD_CRYPTSETUP_USE_TOKEN_MODULE=0, plugin moved away), and
//     cryptsetup open --token-only (the plugin; the PIN on stdin) open
//     the volumes, and the kernel's dm-crypt reads the plaintext blkcrypt
//     wrote on the host. A wrong PIN is refused both ways. The TPM's
//     dictionary-attack limit is raised first so that these refusals do
//     not lock it out.
//  2. systemd-cryptenroll --tpm2-pcrs=7 in the guest; after the boot
//     blkcrypt read --token-only opens that volume through the swtpm.
//  3. After PCR 7 is extended in the guest, systemd-cryptsetup and the
//     plugin refuse; after it is extended on the host, blkcrypt refuses.
//
// PCR 7 is shared by replaying SeaBIOS's one PCR 7 event on the host's
// swtpm (seabiosPCR7Event); the guest's value is compared to the host's.
func TestTPMGuest(t *testing.T) {
	k := need(t)
	cs := testenv.Need(t, "cryptsetup", "cryptsetup-bin")
	testenv.Need(t, "swtpm", "swtpm")
	testenv.Need(t, "tpm2_pcrextend", "tpm2-tools")
	testenv.Need(t, "systemd-cryptenroll", "systemd")
	const sdCryptsetup = "/lib/systemd/systemd-cryptsetup"
	const plugin = "/usr/lib/x86_64-linux-gnu/cryptsetup/libcryptsetup-token-systemd-tpm2.so"
	for _, p := range []string{sdCryptsetup, plugin} {
		if _, err := os.Stat(p); err != nil {
			testenv.Missing(t, "%s (apt package systemd): %v", p, err)
		}
	}
	dir := t.TempDir()
	cli := filepath.Join(dir, "blkcrypt")
	goBuild(t, "../../cmd/blkcrypt", cli, false)
	state := filepath.Join(dir, "tpm")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	const plainLen = 65536
	pass := []byte("kernel tpm passphrase")
	keyFile := filepath.Join(dir, "key")
	pinFile := filepath.Join(dir, "pin")
	const pin = "2718281828"
	if err := os.WriteFile(keyFile, pass, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pinFile, []byte(pin), 0o600); err != nil {
		t.Fatal(err)
	}
	// Three volumes made by cryptsetup, plaintext written by blkcrypt.
	plain := map[string][]byte{}
	imgs := map[string]string{}
	for _, name := range []string{"plain", "pin", "guest"} {
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

	// Host: blkcrypt enrolls against the swtpm, PCR 7 as the guest's will be.
	sw := swtpmtest.Start(t, state)
	// The wrong PINs the guest tries count against the TPM's dictionary
	// attack protection; swtpm's default few tries would lock the TPM
	// out before systemd-cryptenroll's turn.
	sw.Tool(t, "tpm2_dictionarylockout", "--setup-parameters", "--max-tries=100", "--recovery-time=1", "--lockout-recovery-time=1", "--clear-lockout")
	hostPCR := sw.ExtendPCR(t, 7, seabiosPCR7Event)
	mustTPMTool(t, nil, cli, "enroll", "--tpm2-device", sw.TCTI, "--tpm2-pcrs", "7", "--unlock-key-file", keyFile, imgs["plain"])
	mustTPMTool(t, nil, cli, "enroll", "--tpm2-device", sw.TCTI, "--tpm2-pcrs", "7", "--tpm2-with-pin", "--tpm2-pin-file", pinFile,
		"--unlock-key-file", keyFile, imgs["pin"])
	sw.Stop(t)

	// The guest, with the same TPM.
	var ext [32]byte
	rand.Read(ext[:])
	script := strings.NewReplacer("@LEN@", strconv.Itoa(plainLen), "@PIN@", pin, "@EXTEND@", hex.EncodeToString(ext[:])).Replace(tpmScript)
	files := map[string][]byte{"/kt/key": pass}
	guestLibs(t, files, plugin,
		"/usr/lib/x86_64-linux-gnu/libtss2-esys.so.0", "/usr/lib/x86_64-linux-gnu/libtss2-rc.so.0",
		"/usr/lib/x86_64-linux-gnu/libtss2-mu.so.0", "/usr/lib/x86_64-linux-gnu/libtss2-tctildr.so.0",
		"/usr/lib/x86_64-linux-gnu/libtss2-tcti-device.so.0")
	// libcryptsetup looks for token plugins next to itself, which is
	// /lib/x86_64-linux-gnu in the guest (no merged /usr there).
	files["/lib/x86_64-linux-gnu/cryptsetup/"+filepath.Base(plugin)] = files[plugin]
	qsw := swtpmtest.StartForQemu(t, state)
	res := run(t, k, Boot{
		Script:    script,
		Files:     files,
		Programs:  []string{sdCryptsetup, "systemd-cryptenroll", "tpm2_pcrextend"},
		Disks:     []Disk{{Name: "plain", Path: imgs["plain"]}, {Name: "pin", Path: imgs["pin"]}, {Name: "guest", Path: imgs["guest"]}},
		TPMSocket: qsw.Socket,
		Timeout:   6 * time.Minute,
	})
	qsw.Stop(t)
	// The guest's diagnostics (@@S: the logs of steps that failed, as the
	// refusals should) are shown only when the test fails.
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
	if g := strings.ToLower(one("@@PCR7 ")); g != hostPCR {
		t.Fatalf("PCR 7 in the guest is %s, on the host after replaying SeaBIOS's event %s: the policies cannot match", g, hostPCR)
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
	refuses := func(name, what string) {
		t.Helper()
		if rc, s := sum(name); rc == "0" || s != "none" {
			t.Errorf("%s: exit %s, mapping %s; want a refusal and no mapping", what, rc, s)
		}
	}
	opens("sdA", "plain", "systemd-cryptsetup attach of blkcrypt's PCR 7 token")
	opens("sdB", "pin", "systemd-cryptsetup attach of blkcrypt's PCR 7+PIN token with $PIN")
	refuses("sdBwrong", "systemd-cryptsetup attach with a wrong $PIN")
	opens("csA", "plain", "cryptsetup open --token-only (systemd-tpm2 plugin) of blkcrypt's token")
	opens("csB", "pin", "cryptsetup open --token-only (systemd-tpm2 plugin, PIN on stdin) of blkcrypt's PIN token")
	opens("sdAbuiltin", "plain", "systemd-cryptsetup attach (its own TPM2 code, no plugin) of blkcrypt's PCR 7 token")
	opens("sdBbuiltin", "pin", "systemd-cryptsetup attach (its own TPM2 code, no plugin) of blkcrypt's PCR 7+PIN token with $PIN")
	refuses("sdBbuiltinwrong", "systemd-cryptsetup attach (its own TPM2 code) with a wrong $PIN")
	// Both of systemd-cryptsetup's ways were taken: the plugin when it
	// is there, its own code when it is not.
	if n := one("@@RC plugin-loads "); n != "2" {
		t.Errorf("systemd-cryptsetup loaded the systemd-tpm2 plugin %s times for the two volumes, want 2", n)
	}
	if n := one("@@RC builtin-plugin-loads "); n != "0" {
		t.Errorf("systemd-cryptsetup loaded the systemd-tpm2 plugin %s times after it was moved away, want 0", n)
	}
	if rc := one("@@RC enroll "); rc != "0" {
		t.Fatalf("systemd-cryptenroll in the guest exited %s", rc)
	}
	opens("sdC", "guest", "systemd-cryptsetup attach of systemd-cryptenroll's token")
	if one("@@PCR7X ") == one("@@PCR7 ") {
		t.Fatalf("tpm2_pcrextend in the guest did not change PCR 7")
	}
	refuses("sdA2", "systemd-cryptsetup attach after PCR 7 changed")
	refuses("csA2", "cryptsetup open --token-only after PCR 7 changed")

	// Host again, same TPM: blkcrypt opens what systemd-cryptenroll
	// enrolled in the guest, and refuses once PCR 7 differs.
	sw = swtpmtest.Start(t, state)
	if p := sw.ExtendPCR(t, 7, seabiosPCR7Event); p != hostPCR {
		t.Fatalf("host PCR 7 after the restart %s, want %s", p, hostPCR)
	}
	outFile := filepath.Join(dir, "guest.read")
	read := func() (string, error) {
		os.Remove(outFile)
		return tpmTool(nil, cli, "read", "--token-only", "--tpm2-device", sw.TCTI, "--length", strconv.Itoa(plainLen), "-o", outFile, imgs["guest"])
	}
	if out, err := read(); err != nil {
		t.Errorf("blkcrypt read --token-only of the volume systemd-cryptenroll enrolled in the guest: %v: %s", err, out)
	} else if got, _ := os.ReadFile(outFile); !bytes.Equal(got, plain["guest"]) {
		t.Errorf("blkcrypt read --token-only of the volume systemd-cryptenroll enrolled in the guest gave %d bytes, not the plaintext", len(got))
	}
	sw.ExtendPCR(t, 7, hex.EncodeToString(ext[:]))
	if got, err := read(); err == nil {
		t.Errorf("blkcrypt read --token-only after PCR 7 changed succeeded: %s", got)
	} else if strings.Count(strings.TrimSpace(got), "\n") != 0 {
		t.Errorf("blkcrypt read --token-only after PCR 7 changed: want a one-line error, got %q", got)
	}
}
