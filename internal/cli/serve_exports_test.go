package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
	"github.com/blkcrypt/blkcrypt/nbd"
)

// syncBuffer is a bytes.Buffer safe for the gateway's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor polls the gateway's stderr until it holds want n times.
func (s *syncBuffer) waitFor(t *testing.T, want string, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for strings.Count(s.String(), want) < n {
		if time.Now().After(deadline) {
			t.Fatalf("gateway never logged %q %d times:\n%s", want, n, s.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startGatewayCLI runs `blkcrypt serve` in-process with args on a Unix
// socket; it returns the socket, the gateway's stderr and a stop function
// returning the exit code.
func startGatewayCLI(t *testing.T, args ...string) (string, *syncBuffer, func() int) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "gw.sock")
	errb := &syncBuffer{}
	env := &Env{Stdin: bytes.NewReader(nil), Stdout: io.Discard, Stderr: errb}
	stop := testenv.Serve(t, sock, func(ctx context.Context) int {
		return Main(ctx, append([]string{"serve", "--listen", "unix:" + sock}, args...), env)
	}, errb.String)
	return sock, errb, stop
}

// gatewayImage makes a LUKS2 image with cryptsetup (cheap PBKDF2) holding
// 4 MiB of data, and its passphrase file.
func gatewayImage(t *testing.T, dir, name string) (img, pass string) {
	t.Helper()
	img = filepath.Join(dir, name+".img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(20 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	pass = writeFile(t, dir, name+".pass", []byte("secret-"+name+"-7f3a"))
	if out, err := cryptsetup(t, "luksFormat", "-q", "--type", "luks2", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000",
		"--key-file", pass, img); err != nil {
		t.Fatalf("cryptsetup luksFormat: %v %s", err, out)
	}
	return img, pass
}

const gwDataSize = 4 << 20 // data bytes of a luks2Image

func gwURI(sock, name string) string { return "nbd+unix:///" + name + "?socket=" + sock }

// listedExports is `nbdinfo --list --json`: the export names, sorted.
func listedExports(t *testing.T, sock string) []string {
	t.Helper()
	cmd := exec.Command("nbdinfo", "--list", "--json", "nbd+unix:///?socket="+sock)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("nbdinfo --list: %v: %s", err, stderr.String())
	}
	var v struct {
		Exports []struct {
			Name string `json:"export-name"`
			Desc string `json:"description"`
			Size int64  `json:"export-size"`
		} `json:"exports"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("nbdinfo --list output: %v\n%s", err, out)
	}
	var names []string
	for _, e := range v.Exports {
		if e.Size != gwDataSize || !strings.HasPrefix(e.Desc, "blkcrypt aes-xts-plain64") {
			t.Errorf("nbdinfo --list: export %s: size %d, description %q", e.Name, e.Size, e.Desc)
		}
		names = append(names, e.Name)
	}
	sort.Strings(names)
	return names
}

// qemuIO is an interactive qemu-io on one export: one NBD client that
// stays connected across commands.
type qemuIO struct {
	t   *testing.T
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startQemuIO(t *testing.T, uri string) *qemuIO {
	t.Helper()
	cmd := exec.Command("qemu-io", "-f", "raw", uri)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	q := &qemuIO{t: t, cmd: cmd, in: in, out: bufio.NewReader(out)}
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	q.next() // the first prompt
	return q
}

// next reads up to the next prompt (or EOF) and returns what came before.
func (q *qemuIO) next() (string, bool) {
	const prompt = "qemu-io> "
	var sb strings.Builder
	done := make(chan bool, 1)
	go func() {
		for {
			b, err := q.out.ReadByte()
			if err != nil {
				done <- false
				return
			}
			sb.WriteByte(b)
			if strings.HasSuffix(sb.String(), prompt) {
				done <- true
				return
			}
		}
	}()
	select {
	case ok := <-done:
		return strings.TrimSuffix(sb.String(), prompt), ok
	case <-time.After(60 * time.Second):
		q.t.Fatalf("qemu-io did not answer within 60s")
		return "", false
	}
}

// do runs one command and fails the test unless its output has want.
func (q *qemuIO) do(cmd, want string) {
	q.t.Helper()
	if _, err := fmt.Fprintln(q.in, cmd); err != nil {
		q.t.Fatalf("qemu-io %q: %v", cmd, err)
	}
	out, _ := q.next()
	if !strings.Contains(out, want) || strings.Contains(out, "failed") || strings.Contains(out, "error") {
		q.t.Fatalf("qemu-io %q: %q, want %q", cmd, out, want)
	}
}

// TestGatewayAcceptance: one `blkcrypt serve` with three LUKS2 exports
// (two from --exports FILE, one from --export) and a fourth whose key is
// wrong. The wrong one is reported and not listed; the others serve two
// real clients each (nbdcopy and qemu-io) and every byte read equals the
// test's shadow copy. SIGHUP then removes one export (its lock is
// released) and adds another while a qemu-io client of a third keeps its
// connection and keeps working; a file that does not parse changes
// nothing, and fixing the wrong key brings that export in. After the
// gateway stops, a fresh `blkcrypt read` of each image equals the shadow.
func TestGatewayAcceptance(t *testing.T) {
	needTool(t, "nbdcopy", "libnbd-bin")
	needTool(t, "nbdinfo", "libnbd-bin")
	needTool(t, "qemu-io", "qemu-utils")
	dir := t.TempDir()
	imgs, passes := map[string]string{}, map[string]string{}
	for _, n := range []string{"a", "b", "c", "d", "bad"} {
		imgs[n], passes[n] = gatewayImage(t, dir, n)
	}
	wrong := writeFile(t, dir, "wrong.pass", []byte("not the passphrase"))
	spec := func(n, pass string) string { return n + "=" + imgs[n] + ",key-file=" + pass + ",type=luks2" }
	exports := filepath.Join(dir, "exports")
	writeFile(t, dir, "exports", []byte("# the gateway's volumes\n"+spec("a", passes["a"])+"\n\n"+spec("b", passes["b"])+"\n  "+spec("bad", wrong)+"\n"))

	sock, stderr, stop := startGatewayCLI(t, "--exports", exports, "--export", spec("c", passes["c"]))
	badLines := 0
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(line, "export bad") {
			badLines++
			if !strings.HasPrefix(line, "blkcrypt: export bad: not served: ") || !strings.Contains(line, "passphrase") {
				t.Errorf("the wrong key is reported as %q", line)
			}
		}
	}
	if badLines != 1 {
		t.Errorf("the wrong key was reported in %d lines, want 1:\n%s", badLines, stderr.String())
	}
	if got := strings.Join(listedExports(t, sock), ","); got != "a,b,c" {
		t.Fatalf("nbdinfo --list = %s, want a,b,c", got)
	}
	if out, err := exec.Command("nbdinfo", gwURI(sock, "bad")).CombinedOutput(); err == nil {
		t.Errorf("nbdinfo reached the export with the wrong key: %s", out)
	}
	if out, err := exec.Command("nbdinfo", "nbd+unix:///?socket="+sock).CombinedOutput(); err == nil {
		t.Errorf("the default name \"\" reached an export of a gateway: %s", out)
	}

	// Client 1 of each export, all at once: nbdcopy writes the volume.
	shadow := map[string][]byte{}
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for i, n := range []string{"a", "b", "c"} {
		shadow[n] = randBytes(gwDataSize)
		src := writeFile(t, dir, n+".src", shadow[n])
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, err := exec.Command("nbdcopy", "--flush", src, gwURI(sock, n)).CombinedOutput(); err != nil {
				errs <- fmt.Errorf("nbdcopy to %s (#%d): %v %s", n, i, err, out)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Client 2 of each export, connected while client 1 of the others
	// reads: qemu-io writes patterns at a few places.
	qs := map[string]*qemuIO{}
	for i, n := range []string{"a", "b", "c"} {
		q := startQemuIO(t, gwURI(sock, n))
		qs[n] = q
		for j, off := range []int{0, 1 << 20, 3<<20 + 4096} {
			pat := byte(0x10*(i+1) + j)
			q.do(fmt.Sprintf("write -P 0x%02x %d 8192", pat, off), "wrote 8192/8192 bytes")
			copy(shadow[n][off:off+8192], bytes.Repeat([]byte{pat}, 8192))
		}
		q.do("flush", "")
	}
	checkAll := func(names ...string) {
		t.Helper()
		for _, n := range names {
			back := filepath.Join(dir, n+".back")
			if out, err := exec.Command("nbdcopy", gwURI(sock, n), back).CombinedOutput(); err != nil {
				t.Fatalf("nbdcopy from %s: %v %s", n, err, out)
			}
			got, _ := os.ReadFile(back)
			if !bytes.Equal(got, shadow[n]) {
				t.Fatalf("export %s: bytes read differ from the shadow copy", n)
			}
		}
	}
	checkAll("a", "b", "c")

	// While b is served its image is locked.
	in := writeFile(t, dir, "in", []byte("hello"))
	if code, _, e := run(t, nil, "write", imgs["b"], "--key-file", passes["b"], "--offset-bytes", "0", "--length", "5", "-i", in); code != ExitBusy {
		t.Fatalf("write to a served image: exit %d (%s), want %d", code, e, ExitBusy)
	}

	// Reload: b goes, d comes, a and c stay; a's qemu-io stays connected.
	writeFile(t, dir, "exports", []byte(spec("a", passes["a"])+"\n"+spec("d", passes["d"])+"\n"+spec("bad", wrong)+"\n"))
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	stderr.waitFor(t, "reloaded:", 1)
	if !strings.Contains(stderr.String(), "export b: removed") || strings.Contains(stderr.String(), "export a: removed") {
		t.Errorf("reload log: %s", stderr.String())
	}
	if got := strings.Join(listedExports(t, sock), ","); got != "a,c,d" {
		t.Fatalf("after SIGHUP nbdinfo --list = %s, want a,c,d", got)
	}
	qs["a"].do("read -P 0x10 0 8192", "read 8192/8192 bytes")
	qs["a"].do("write -P 0x77 2097152 4096", "wrote 4096/4096 bytes")
	copy(shadow["a"][2<<20:2<<20+4096], bytes.Repeat([]byte{0x77}, 4096))
	qs["a"].do("flush", "")
	// b's client lost its connection; a new one cannot reach b.
	fmt.Fprintln(qs["b"].in, "read 0 4096")
	if out, _ := qs["b"].next(); strings.Contains(out, "read 4096/4096") {
		t.Errorf("the removed export still answered: %q", out)
	}
	if out, err := exec.Command("nbdinfo", gwURI(sock, "b")).CombinedOutput(); err == nil {
		t.Errorf("nbdinfo reached the removed export: %s", out)
	}
	// b's volume was closed: its lock is gone, so writing works.
	if code, _, e := run(t, nil, "write", imgs["b"], "--key-file", passes["b"], "--offset-bytes", "0", "--length", "5", "-i", in); code != 0 {
		t.Fatalf("write to the removed export's image: exit %d (%s)", code, e)
	}
	copy(shadow["b"], "hello")
	shadow["d"] = make([]byte, gwDataSize)
	if out, err := exec.Command("nbdcopy", gwURI(sock, "d"), filepath.Join(dir, "d.first")).CombinedOutput(); err != nil {
		t.Fatalf("nbdcopy from the added export: %v %s", err, out)
	}
	shadow["d"], _ = os.ReadFile(filepath.Join(dir, "d.first"))
	q := startQemuIO(t, gwURI(sock, "d"))
	q.do("write -P 0x99 4096 4096", "wrote 4096/4096 bytes")
	copy(shadow["d"][4096:8192], bytes.Repeat([]byte{0x99}, 4096))
	checkAll("a", "c", "d")
	qs["c"].do("read -P 0x31 1048576 8192", "read 8192/8192 bytes")

	// A file that does not parse changes nothing; a fixed key brings the
	// failed export in without touching the others.
	writeFile(t, dir, "exports", []byte(spec("a", passes["a"])+"\nthis is not an export\n"))
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	stderr.waitFor(t, "keeping the current exports", 1)
	if got := strings.Join(listedExports(t, sock), ","); got != "a,c,d" {
		t.Fatalf("after a broken reload nbdinfo --list = %s, want a,c,d", got)
	}
	writeFile(t, dir, "exports", []byte(spec("a", passes["a"])+"\n"+spec("d", passes["d"])+"\n"+spec("bad", passes["bad"])+"\n"))
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	stderr.waitFor(t, "reloaded:", 2)
	if got := strings.Join(listedExports(t, sock), ","); got != "a,bad,c,d" {
		t.Fatalf("after fixing the key nbdinfo --list = %s, want a,bad,c,d", got)
	}
	qs["a"].do("read -P 0x77 2097152 4096", "read 4096/4096 bytes")
	if strings.Count(stderr.String(), "removed") != 1 {
		t.Errorf("a reload removed an unchanged export: %s", stderr.String())
	}

	if code := stop(); code != 0 {
		t.Fatalf("gateway exited %d: %s", code, stderr.String())
	}
	for n := range passes {
		if p, _ := os.ReadFile(passes[n]); strings.Contains(stderr.String(), string(p)) {
			t.Errorf("the passphrase of %s is in the gateway's stderr", n)
		}
	}
	// What the clients were told is on disk, as a fresh open reads it.
	for _, n := range []string{"a", "b", "c", "d"} {
		code, out, e := run(t, nil, "read", imgs[n], "--key-file", passes[n])
		if code != 0 || out != string(shadow[n]) {
			t.Errorf("blkcrypt read %s after the gateway stopped: exit %d (%s), equal to shadow %v", n, code, e, out == string(shadow[n]))
		}
	}
}

// TestGatewayBadInput: malformed exports are usage errors (exit 1) named
// in one line, before any volume is opened or anything listens; when no
// export can be served the exit code is the failure's (2 for a wrong
// passphrase).
func TestGatewayBadInput(t *testing.T) {
	dir := t.TempDir()
	img := writeFile(t, dir, "x.img", make([]byte, 1<<20))
	key := writeFile(t, dir, "k", []byte("k"))
	dup := writeFile(t, dir, "dup", []byte("x="+img+",key-file="+key+"\nx="+img+",key-file="+key+"\n"))
	badLine := writeFile(t, dir, "badline", []byte("# ok\nx="+img+",key-file="+key+"\nnonsense\n"))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--export", "x"}, "is not NAME=DEVICE"},
		{[]string{"--export", "=" + img + ",key-file=" + key}, "export name"},
		{[]string{"--export", "x=" + img + ",type=plain"}, "needs key-file"},
		{[]string{"--export", "x=" + img + ",key-file=" + key + ",token-only"}, "token-only cannot be used with key-file"},
		{[]string{"--export", "x=" + img + ",key-file=-"}, "cannot come from stdin"},
		{[]string{"--export", "x=" + img + ",key-file=" + key + ",colour=red"}, `unknown option "colour"`},
		{[]string{"--export", "x=" + img + ",key-file=" + key + ",read-only=yes"}, "takes no value"},
		{[]string{"--export", "x=" + img + ",key-file=" + key + ",key-slot=one"}, "not a whole number"},
		{[]string{"--export", "x=" + img + ",key-file=" + key, "--export", "x=" + img + ",key-file=" + key}, "defined twice"},
		{[]string{"--exports", dup}, "defined twice"},
		{[]string{"--exports", badLine}, "badline:3:"},
		{[]string{"--exports", filepath.Join(dir, "missing")}, "reading --exports"},
		{[]string{img, "--export", "x=" + img + ",key-file=" + key}, "not both"},
	} {
		code, _, e := run(t, nil, append([]string{"serve", "--listen", "unix:" + filepath.Join(dir, "s.sock")}, tc.args...)...)
		if code != ExitUsage || !strings.Contains(e, tc.want) || strings.Count(strings.TrimSpace(e), "\n") != 0 {
			t.Errorf("serve %v: exit %d, stderr %q; want %d and one line with %q", tc.args, code, e, ExitUsage, tc.want)
		}
		if _, err := os.Stat(filepath.Join(dir, "s.sock")); err == nil {
			t.Fatalf("serve %v listened", tc.args)
		}
	}
	if got, _ := os.ReadFile(img); !bytes.Equal(got, make([]byte, 1<<20)) {
		t.Errorf("bad input wrote to the device")
	}

	needTool(t, "cryptsetup", "cryptsetup-bin")
	limg, pass := gatewayImage(t, dir, "only")
	before, _ := os.ReadFile(limg)
	code, _, e := run(t, nil, "serve", "--listen", "unix:"+filepath.Join(dir, "s.sock"), "--export", "v="+limg+",key-file="+key)
	if code != ExitPermission || !strings.Contains(e, "export v: not served") {
		t.Errorf("the only export with a wrong key: exit %d, %q; want %d", code, e, ExitPermission)
	}
	if after, _ := os.ReadFile(limg); !bytes.Equal(before, after) {
		t.Errorf("a refused export changed its image")
	}
	_ = pass
}

// TestExportOptionsAreFlags: every option an export line may carry
// (nbd.VolumeExportSyntax), but cinder-key-file, is a flag of serve DEVICE
// of the same kind, and exportOptionsOf puts a line's value of each into
// that flag's field, as the command line would; token-only, which a line
// without a key implies, and cinder-key-file come from the library's
// nbd.VolumeExportOptions.
func TestExportOptionsAreFlags(t *testing.T) {
	serve, _ := lookupCommand("serve")
	specs := serve.specs()
	kinds := map[nbd.OptionKind]flagKind{nbd.OptionString: kindString, nbd.OptionInt: kindInt, nbd.OptionFlag: kindBool}
	line := "a=img"
	for name, kind := range exportSyntax.Options {
		if name == "cinder-key-file" {
			continue
		}
		i := slices.IndexFunc(specs, func(s flagSpec) bool { return s.name == name })
		if i < 0 || specs[i].kind != kinds[kind] {
			t.Errorf("export option %s (kind %d) is no serve flag of that kind", name, kind)
		}
		switch {
		case name == "token-only": // contradicts key-file
		case kind == nbd.OptionFlag:
			line += "," + name
		case kind == nbd.OptionInt:
			line += fmt.Sprintf(",%s=%d", name, 3+len(name))
		default:
			line += fmt.Sprintf(",%s=%s-value", name, name)
		}
	}
	e, err := nbd.ParseExport(line, exportSyntax)
	if err != nil {
		t.Fatal(err)
	}
	o, err := exportOptionsOf(e)
	if err != nil {
		t.Fatal(err)
	}
	v := reflect.ValueOf(o.serveOptions)
	for name, want := range e.Options {
		i := slices.IndexFunc(specs, func(s flagSpec) bool { return s.name == name })
		f := v.FieldByIndex(specs[i].index)
		if f.Kind() == reflect.Pointer && f.IsNil() {
			t.Errorf("export option %s=%s: serve's field is not set", name, want)
			continue
		}
		if got := fmt.Sprint(reflect.Indirect(f).Interface()); got != want {
			t.Errorf("export option %s=%s: serve's field holds %s", name, want, got)
		}
	}
	lib, _ := nbd.VolumeExportOptionsOf(e)
	if o.TokenOnly || lib.TokenOnly || o.TokenID == nil || *o.TokenID != *lib.TokenID || o.Partition == nil || *o.Partition != *lib.Partition {
		t.Errorf("token-only %v (library %v), token-id, partition differ from the library's", o.TokenOnly, lib.TokenOnly)
	}
	// No key: token-only, as the library implies it; a cinder key is the
	// library's.
	for _, c := range []struct {
		line      string
		tokenOnly bool
		cinder    string
	}{{"b=img", true, ""}, {"b=img,cinder-key-file=/k", false, "/k"}} {
		e, _ := nbd.ParseExport(c.line, exportSyntax)
		o, err := exportOptionsOf(e)
		if err != nil || o.TokenOnly != c.tokenOnly || o.cinderKeyFile != c.cinder || o.KeyFile != "" {
			t.Errorf("%s: token-only %v, cinder %q, %v", c.line, o.TokenOnly, o.cinderKeyFile, err)
		}
	}
}
