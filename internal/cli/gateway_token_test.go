package cli

import (
	"bytes"
	"context"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/internal/tangtest"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
	"github.com/blkcrypt/blkcrypt/nbd"
)

// tokenGatewayImages makes LUKS2 images (gatewayImage: cryptsetup, cheap
// PBKDF2) holding random data written with their passphrases, and binds
// each named in bound to tang with the real clevis luks bind. It returns
// the images, passphrase files and data by name.
func tokenGatewayImages(t *testing.T, dir string, tang *tangtest.Server, names, bound []string) (imgs, passes map[string]string, data map[string][]byte) {
	t.Helper()
	imgs, passes, data = map[string]string{}, map[string]string{}, map[string][]byte{}
	for _, n := range names {
		imgs[n], passes[n] = gatewayImage(t, dir, n)
		data[n] = randBytes(gwDataSize)
		in := writeFile(t, dir, n+".data", data[n])
		if code, _, e := run(t, nil, "write", "--key-file", passes[n], "--input", in, imgs[n]); code != 0 {
			t.Fatalf("write %s: exit %d: %s", n, code, e)
		}
	}
	for _, n := range bound {
		tang.Bind(t, imgs[n], passes[n])
	}
	return imgs, passes, data
}

// gatewayLine is the stderr line that mentions export name.
func gatewayLine(stderr, name string) string {
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, "export "+name+":") {
			return l
		}
	}
	return ""
}

// checkNotServed: the gateway said, on one line naming the export and its
// clevis token and tang's address, that the export is not served.
func checkNotServed(t *testing.T, stderr, name, url string) {
	t.Helper()
	l := gatewayLine(stderr, name)
	for _, want := range []string{"not served", "token 0 (clevis", url} {
		if !strings.Contains(l, want) {
			t.Errorf("export %s with tang down: want one line with %q, got %q\n%s", name, want, l, stderr)
		}
	}
}

// copyExport reads the whole export with nbdcopy.
func copyExport(t *testing.T, sock, name string) []byte {
	t.Helper()
	dst := filepath.Join(t.TempDir(), name+".nbdcopy")
	if out, err := exec.Command("nbdcopy", gwURI(sock, name), dst).CombinedOutput(); err != nil {
		t.Fatalf("nbdcopy from export %s: %v %s", name, err, out)
	}
	b, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGatewayTokens: exports with no key file, bound to Debian's tang by
// clevis luks bind, are unlocked by their tang tokens: nbdcopy reads the
// bytes written with the passphrase. Tang down at startup: that export is
// reported on one line naming it and its clevis token, the key-file export
// serves; a SIGHUP with tang back serves it, leaving the other's client
// connected. Tang down at a SIGHUP that adds an export: the new one is
// reported, the served ones (already unlocked) go on; the next SIGHUP with
// tang up serves it. When no export can be unlocked, serve does not start
// (exit 2, the token's failure).
func TestGatewayTokens(t *testing.T) {
	needTool(t, "cryptsetup", "cryptsetup-bin")
	needTool(t, "nbdcopy", "libnbd-bin")
	needTool(t, "nbdinfo", "libnbd-bin")
	needTool(t, "qemu-io", "qemu-utils")
	tang := tangtest.Start(t)
	dir := t.TempDir()
	imgs, passes, data := tokenGatewayImages(t, dir, tang, []string{"a", "b", "k"}, []string{"a", "b"})
	line := func(n string) string {
		if n == "k" {
			return n + "=" + imgs[n] + ",key-file=" + passes[n]
		}
		return n + "=" + imgs[n] // no key: its tokens
	}
	exports := writeFile(t, dir, "exports", []byte(line("a")+"\n"+line("k")+"\n"))

	// Tang up: the token export serves what the passphrase wrote.
	sock, stderr, stop := startGatewayCLI(t, "--export", line("a"), "--export", "t="+imgs["b"]+",token-only,token-type=clevis,token-id=0")
	if got := strings.Join(listedExports(t, sock), ","); got != "a,t" {
		t.Fatalf("nbdinfo --list = %s, want a,t\n%s", got, stderr.String())
	}
	if !bytes.Equal(copyExport(t, sock, "a"), data["a"]) || !bytes.Equal(copyExport(t, sock, "t"), data["b"]) {
		t.Fatal("an export unlocked through tang reads other bytes than were written with its passphrase")
	}
	if code := stop(); code != 0 {
		t.Fatalf("gateway exited %d: %s", code, stderr.String())
	}

	// Tang down, every export bound to it: nothing to serve, no start.
	tang.Stop()
	code, _, e := run(t, nil, "serve", "--listen", "unix:"+filepath.Join(dir, "none.sock"), "--export", line("a"))
	if code != ExitPermission || !strings.Contains(e, "no export could be served") {
		t.Errorf("serve with its only export's tang down: exit %d, want %d: %s", code, ExitPermission, e)
	}
	checkNotServed(t, e, "a", tang.URL)
	if _, err := os.Stat(filepath.Join(dir, "none.sock")); err == nil {
		t.Error("serve listened with nothing to serve")
	}

	// Tang down at startup: a is reported, k serves.
	sock, stderr, stop = startGatewayCLI(t, "--exports", exports)
	checkNotServed(t, stderr.String(), "a", tang.URL)
	if got := strings.Join(listedExports(t, sock), ","); got != "k" {
		t.Fatalf("with tang down nbdinfo --list = %s, want k", got)
	}
	qk := startQemuIO(t, gwURI(sock, "k"))
	qk.do("read 0 4096", "read 4096/4096 bytes")

	// Tang back, SIGHUP: a is served; k's client stays connected.
	tang.Restart(t)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	stderr.waitFor(t, "reloaded:", 1)
	if got := strings.Join(listedExports(t, sock), ","); got != "a,k" {
		t.Fatalf("after SIGHUP with tang up nbdinfo --list = %s, want a,k\n%s", got, stderr.String())
	}
	if !bytes.Equal(copyExport(t, sock, "a"), data["a"]) {
		t.Fatal("export a, served at the reload, reads other bytes than were written")
	}
	qk.do("write -P 0x5a 8192 4096", "wrote 4096/4096 bytes")
	copy(data["k"][8192:12288], bytes.Repeat([]byte{0x5a}, 4096))

	// Tang down at a SIGHUP that adds b: b is reported, a and k go on.
	tang.Stop()
	writeFile(t, dir, "exports", []byte(line("a")+"\n"+line("b")+"\n"+line("k")+"\n"))
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	stderr.waitFor(t, "reloaded:", 2)
	checkNotServed(t, stderr.String(), "b", tang.URL)
	if got := strings.Join(listedExports(t, sock), ","); got != "a,k" {
		t.Fatalf("after SIGHUP with tang down nbdinfo --list = %s, want a,k", got)
	}
	if !bytes.Equal(copyExport(t, sock, "a"), data["a"]) {
		t.Fatal("export a reads other bytes after a reload with tang down")
	}
	// The next SIGHUP, tang up: b is served.
	tang.Restart(t)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	stderr.waitFor(t, "reloaded:", 3)
	if got := strings.Join(listedExports(t, sock), ","); got != "a,b,k" {
		t.Fatalf("after SIGHUP with tang back nbdinfo --list = %s, want a,b,k\n%s", got, stderr.String())
	}
	if !bytes.Equal(copyExport(t, sock, "b"), data["b"]) {
		t.Fatal("export b reads other bytes than were written with its passphrase")
	}
	if !bytes.Equal(copyExport(t, sock, "k"), data["k"]) {
		t.Fatal("export k reads other bytes than its client wrote")
	}
	if strings.Contains(stderr.String(), "removed") {
		t.Errorf("a reload removed an export that did not change:\n%s", stderr.String())
	}
	if code := stop(); code != 0 {
		t.Fatalf("gateway exited %d: %s", code, stderr.String())
	}
	for n, p := range passes {
		if b, _ := os.ReadFile(p); strings.Contains(stderr.String(), string(b)) {
			t.Errorf("the passphrase of %s is in the gateway's stderr", n)
		}
	}
}

// TestGatewayTangSilent: a tang server that accepts and never answers
// holds up an export's opening only until the context ends: serve stopped
// while it waits returns at once (well within the tang timeout), having
// served nothing.
func TestGatewayTangSilent(t *testing.T) {
	needTool(t, "cryptsetup", "cryptsetup-bin")
	tang := tangtest.Start(t)
	dir := t.TempDir()
	imgs, _, _ := tokenGatewayImages(t, dir, tang, []string{"s"}, []string{"s"})
	tang.Stop()
	// The port the token names now accepts and stays silent.
	l, err := net.Listen("tcp", strings.TrimPrefix(tang.URL, "http://"))
	if err != nil {
		t.Skipf("cannot take over tang's port: %v", err) // another process took it
	}
	defer l.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	defer func() {
		for len(accepted) > 0 {
			(<-accepted).Close()
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var errb syncBuffer
	go func() {
		env := &Env{Stdin: bytes.NewReader(nil), Stdout: &bytes.Buffer{}, Stderr: &errb}
		done <- Main(ctx, []string{"serve", "--listen", "unix:" + filepath.Join(dir, "s.sock"), "--export", "s=" + imgs["s"]}, env)
	}()
	select {
	case c := <-accepted:
		accepted <- c // closed at the end
	case code := <-done:
		t.Fatalf("serve ended (exit %d) before asking tang: %s", code, errb.String())
	case <-time.After(time.Minute):
		t.Fatal("serve never asked tang")
	}
	cancel()
	select {
	case code := <-done:
		if code == 0 {
			t.Errorf("serve stopped while unlocking exited 0: %s", errb.String())
		}
	case <-time.After(8 * time.Second): // the tang timeout is 10 s
		t.Fatalf("serve did not return after its context ended: %s", errb.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "s.sock")); err == nil {
		t.Error("serve listened with nothing unlocked")
	}
}

// TestGatewayCinderKey: a volume formatted as OpenStack's os-brick formats
// one (cryptsetup luksFormat --key-file=- reading the lowercase hex of the
// raw key on stdin) is served by an export naming the raw key file
// (cinder-key-file=), and reads the bytes written with the hex
// passphrase; the key bytes themselves as key-file= are the wrong
// passphrase, and a key with leading-zero bytes proves the hex is whole
// (os-brick bug 1633518 dropped those zeros).
func TestGatewayCinderKey(t *testing.T) {
	needTool(t, "cryptsetup", "cryptsetup-bin")
	needTool(t, "nbdcopy", "libnbd-bin")
	dir := t.TempDir()
	img := writeFile(t, dir, "cinder.img", nil)
	if err := os.Truncate(img, 20<<20); err != nil {
		t.Fatal(err)
	}
	key := randBytes(32)
	key[0], key[1] = 0x00, 0x0a
	rawKey := writeFile(t, dir, "raw.key", key)
	cs := exec.Command("cryptsetup", "--batch-mode", "luksFormat", "--type", "luks1", "--pbkdf-force-iterations", "1000", "--key-file=-", img)
	cs.Stdin = strings.NewReader(hex.EncodeToString(key))
	if out, err := cs.CombinedOutput(); err != nil {
		t.Fatalf("cryptsetup luksFormat: %v %s", err, out)
	}
	hexPass := writeFile(t, dir, "hex.pass", []byte(hex.EncodeToString(key)))
	data := randBytes(1 << 20)
	in := writeFile(t, dir, "data", data)
	if code, _, e := run(t, nil, "write", "--key-file", hexPass, "--input", in, img); code != 0 {
		t.Fatalf("write with the hex passphrase: exit %d: %s", code, e)
	}

	sock, stderr, stop := startGatewayCLI(t, "--export", "c="+img+",cinder-key-file="+rawKey)
	if got := copyExport(t, sock, "c"); len(got) < len(data) || !bytes.Equal(got[:len(data)], data) {
		t.Fatal("the cinder-key-file export reads other bytes than were written with the hex passphrase")
	}
	if code := stop(); code != 0 {
		t.Fatalf("gateway exited %d: %s", code, stderr.String())
	}
	if strings.Contains(stderr.String(), hex.EncodeToString(key)) {
		t.Error("the passphrase is in the gateway's stderr")
	}
	code, _, e := run(t, nil, "serve", "--listen", "unix:"+filepath.Join(dir, "raw.sock"), "--export", "c="+img+",key-file="+rawKey)
	if code != ExitPermission {
		t.Errorf("the raw key as key-file: exit %d, want %d: %s", code, ExitPermission, e)
	}
	code, _, e = run(t, nil, "serve", "--listen", "unix:"+filepath.Join(dir, "both.sock"), "--export", "c="+img+",cinder-key-file="+rawKey+",key-file="+hexPass)
	if code != ExitUsage || !strings.Contains(e, "cinder-key-file is the whole key") {
		t.Errorf("cinder-key-file with key-file: exit %d, want %d: %s", code, ExitUsage, e)
	}
	empty := writeFile(t, dir, "empty.key", nil)
	code, _, e = run(t, nil, "serve", "--listen", "unix:"+filepath.Join(dir, "empty.sock"), "--export", "c="+img+",cinder-key-file="+empty)
	if code != ExitUsage || !strings.Contains(e, "is empty") {
		t.Errorf("an empty cinder-key-file: exit %d, want %d: %s", code, ExitUsage, e)
	}
}

// FuzzExportOptions: any export line either is refused with an error
// naming the export, or gives typed options that keep the rules: no key
// source means token-only, token-only never comes with a key, a
// non-LUKS type always has a key; errors are one line.
func FuzzExportOptions(f *testing.F) {
	for _, s := range []string{
		"a=/dev/x",
		"a=rbd:rbd/img@conf=/etc/ceph.conf,token-only,token-id=3,token-type=clevis,tpm2-device=swtpm:host=127.0.0.1,port=1",
		"a=img,key-file=k,keyfile-offset=0x10,keyfile-size=32,key-slot=1,type=luks2,header=h,read-only,allow-discards",
		"a=img,cinder-key-file=k,partition=2,lv=vg/lv",
		"a=img,type=plain,cipher=aes-xts-plain64,key-size=512,hash=sha256,offset=8,skip=8,size=100,sector-size=4096,iv-large-sectors,key-file=k",
		"a=img,token-id=99",
		"a=img,type=bitlk",
		"a=img,key-file=k,token-only",
		"a=img,cinder-key-file=-",
		`a=img,tpm2-device="swtpm:host=127.0.0.1,port=2321",token-type=systemd-tpm2`,
		`a=img,key-file="k,1"x`,
		`a=img,key-file="k`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		e, err := nbd.ParseExport(line, exportSyntax)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		o, err := exportOptionsOf(e)
		if err != nil {
			t.Fatalf("ParseExport accepted %q, exportOptionsOf refused it: %v", line, err)
		}
		f := o.openFlags
		key := f.KeyFile != "" || f.VolumeKeyFile != "" || o.cinderKeyFile != ""
		if !key && !f.TokenOnly {
			t.Fatalf("%q: no key and not token-only", line)
		}
		if key && f.TokenOnly {
			t.Fatalf("%q: a key and token-only", line)
		}
		if f.Type != "" && !strings.HasPrefix(f.Type, "luks") && !key {
			t.Fatalf("%q: type %s without a key", line, f.Type)
		}
	})
}

// TestGatewayTPM2: exports sealed to the gateway's TPM (systemd-cryptenroll
// on swtpm, PCR 7) and named with tpm2-device= and no key are served by
// their systemd-tpm2 tokens: nbdcopy reads what the passphrase wrote.
// After PCR 7 changes (another boot state), a SIGHUP that adds the second
// export reports it on one line naming the token and the PCR mismatch,
// and the first, already unlocked, goes on serving.
func TestGatewayTPM2(t *testing.T) {
	needTool(t, "cryptsetup", "cryptsetup-bin")
	needTool(t, "nbdcopy", "libnbd-bin")
	needTool(t, "nbdinfo", "libnbd-bin")
	tcti := startTestSwtpm(t)
	enroll := testenv.Need(t, "systemd-cryptenroll", "systemd")
	extendPCR7(t, tcti) // else systemd warns that PCR 7 is unset
	dir := t.TempDir()
	imgs, passes, data := tokenGatewayImages(t, dir, nil, []string{"p", "q"}, nil)
	for _, n := range []string{"p", "q"} {
		mustTool(t, nil, nil, enroll, "--tpm2-device="+tcti, "--tpm2-pcrs=7", "--unlock-key-file="+passes[n], imgs[n])
	}
	// systemd's TCTI spelling has a comma: the value is quoted.
	line := func(n string) string { return n + "=" + imgs[n] + `,tpm2-device="` + tcti + `"` }
	exports := writeFile(t, dir, "exports", []byte(line("p")+"\n"))
	sock, stderr, stop := startGatewayCLI(t, "--exports", exports)
	if !bytes.Equal(copyExport(t, sock, "p"), data["p"]) {
		t.Fatal("the export unlocked through its TPM2 token reads other bytes than were written with its passphrase")
	}
	extendPCR7(t, tcti)
	writeFile(t, dir, "exports", []byte(line("p")+"\n"+line("q")+"\n"))
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	stderr.waitFor(t, "reloaded:", 1)
	if l := gatewayLine(stderr.String(), "q"); !strings.Contains(l, "not served") || !strings.Contains(l, "systemd-tpm2") || !strings.Contains(l, "PCR") {
		t.Errorf("export q after PCR 7 changed: want one line naming the token and the PCRs, got %q\n%s", l, stderr.String())
	}
	if got := strings.Join(listedExports(t, sock), ","); got != "p" {
		t.Fatalf("after the reload nbdinfo --list = %s, want p", got)
	}
	if !bytes.Equal(copyExport(t, sock, "p"), data["p"]) {
		t.Fatal("export p reads other bytes after PCR 7 changed")
	}
	if code := stop(); code != 0 {
		t.Fatalf("gateway exited %d: %s", code, stderr.String())
	}
}
