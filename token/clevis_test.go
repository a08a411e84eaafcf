package token

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// tang is a Debian tang server the test started: /usr/libexec/tangd under
// socat on a loopback port, with keys from tangd-keygen.
type tang struct {
	url    string
	dir    string
	sigThp string // the signing key's SHA-256 thumbprint (its file name)
	cmd    *exec.Cmd
	exited chan struct{}
}

const tangd = "/usr/libexec/tangd"

func startTang(t *testing.T) *tang {
	t.Helper()
	socat := testenv.Need(t, "socat", "socat")
	testenv.Need(t, "jose", "jose")
	if _, err := os.Stat(tangd); err != nil {
		testenv.Missing(t, "%s (apt package tang): %v", tangd, err)
	}
	dir := t.TempDir()
	run(t, nil, nil, "/usr/libexec/tangd-keygen", dir)
	tg := &tang{dir: dir}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var k struct {
			Alg string `json:"alg"`
		}
		if json.Unmarshal(b, &k) == nil && k.Alg == "ES512" {
			tg.sigThp = strings.TrimSuffix(e.Name(), ".jwk")
		}
	}
	if tg.sigThp == "" {
		t.Fatalf("tangd-keygen made no ES512 key in %s", dir)
	}
	for attempt := 0; attempt < 5; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		var out bytes.Buffer
		cmd := exec.Command(socat, fmt.Sprintf("TCP-LISTEN:%d,bind=127.0.0.1,reuseaddr,fork", port), "EXEC:"+tangd+" "+dir)
		cmd.Stdout, cmd.Stderr = &out, &out
		// Its own process group, so that stopping it ends the tangd it
		// forked for a connection still open.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		tg.cmd, tg.exited = cmd, make(chan struct{})
		go func(c *exec.Cmd, done chan struct{}) { c.Wait(); close(done) }(cmd, tg.exited)
		t.Cleanup(tg.stop)
		tg.url = fmt.Sprintf("http://127.0.0.1:%d", port)
		deadline := time.Now().Add(30 * time.Second)
		for {
			select {
			case <-tg.exited:
				if attempt < 4 {
					goto retry // another process took the port
				}
				t.Fatalf("socat exited: %s", out.String())
			default:
			}
			if rsp, err := http.Get(tg.url + "/adv"); err == nil {
				rsp.Body.Close()
				if rsp.StatusCode == 200 {
					return tg
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("tang did not answer within 30 s: %s", out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	retry:
	}
	return nil
}

// stop kills socat's process group (socat and any tangd it forked).
func (tg *tang) stop() {
	if tg.cmd == nil || tg.cmd.Process == nil {
		return
	}
	select {
	case <-tg.exited:
		return
	default:
	}
	syscall.Kill(-tg.cmd.Process.Pid, syscall.SIGKILL)
	<-tg.exited
}

func tangCfg(url string) string { return `{"url":"` + url + `"}` }

// clevisBind runs clevis luks bind on the image, authorised by its key
// file, and returns the keyslot it added.
func (f *fixture) clevisBind(t *testing.T, env []string, pin, cfg string) int {
	t.Helper()
	tool := testenv.Need(t, "clevis", "clevis")
	testenv.Need(t, "clevis-luks-bind", "clevis-luks")
	before := f.activeSlots(t)
	run(t, env, nil, tool, "luks", "bind", "-y", "-k", f.keyFile, "-d", f.img, pin, cfg)
	for _, s := range f.activeSlots(t) {
		if !slices.Contains(before, s) {
			return s
		}
	}
	t.Fatalf("clevis luks bind added no keyslot (before %v)", before)
	return -1
}

// activeSlots lists the keyslots cryptsetup's JSON metadata holds.
func (f *fixture) activeSlots(t *testing.T) []int {
	t.Helper()
	cs := testenv.Need(t, "cryptsetup", "cryptsetup-bin")
	out := run(t, nil, nil, cs, "luksDump", "--dump-json-metadata", f.img)
	var m struct {
		Keyslots map[string]json.RawMessage `json:"keyslots"`
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	var s []int
	for k := range m.Keyslots {
		n, _ := strconv.Atoi(k)
		s = append(s, n)
	}
	slices.Sort(s)
	return s
}

// clevisPass is clevis luks pass -d IMAGE -s SLOT: the passphrase the real
// clevis decrypts from the slot's token.
func (f *fixture) clevisPass(t *testing.T, env []string, slot int) []byte {
	t.Helper()
	tool := testenv.Need(t, "clevis", "clevis")
	return []byte(run(t, env, nil, tool, "luks", "pass", "-d", f.img, "-s", strconv.Itoa(slot)))
}

// sameListing: ListClevis's lines are clevis luks list's, line for line.
func (f *fixture) sameListing(t *testing.T, env []string, h *blkcrypt.LUKS) {
	t.Helper()
	tool := testenv.Need(t, "clevis", "clevis")
	theirs := strings.TrimSpace(run(t, env, nil, tool, "luks", "list", "-d", f.img))
	bs, err := ListClevis(context.Background(), h)
	if err != nil {
		t.Fatal(err)
	}
	var ours []string
	for _, b := range bs {
		ours = append(ours, b.String())
	}
	if got := strings.Join(ours, "\n"); got != theirs {
		t.Fatalf("ListClevis:\n%s\nclevis luks list:\n%s", got, theirs)
	}
	t.Logf("clevis luks list:\n%s", theirs)
}

// cryptsetupAcceptsSlot: cryptsetup opens keyslot slot with pass.
func (f *fixture) cryptsetupAcceptsSlot(t *testing.T, pass []byte, slot int) bool {
	t.Helper()
	cs := testenv.Need(t, "cryptsetup", "cryptsetup-bin")
	out, err := runErr(nil, pass, cs, "open", "--test-passphrase", "--key-slot", strconv.Itoa(slot), "--key-file", "-", f.img)
	if err != nil {
		t.Logf("cryptsetup: %v: %s", err, out)
	}
	return err == nil
}

func tokenFor(t *testing.T, h *blkcrypt.LUKS, slot int) (int, *ClevisToken) {
	t.Helper()
	toks, err := h.Tokens(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for id, js := range toks {
		if tokenType(js) != TypeClevis {
			continue
		}
		ct, err := ParseClevisToken(js)
		if err != nil {
			t.Fatalf("token %d: %v", id, err)
		}
		for _, k := range ct.Keyslots {
			if k == slot {
				return id, ct
			}
		}
	}
	t.Fatalf("no clevis token names keyslot %d", slot)
	return -1, nil
}

// TestClevisTang: a binding clevis luks bind makes with Debian's tang
// unlocks through Unlock to the passphrase clevis luks pass prints and
// cryptsetup accepts; a binding BindClevis makes is read by clevis luks
// pass, whose passphrase cryptsetup accepts for that keyslot, and Unlock
// gives the same. With tang stopped, both fail with a clear error within
// the timeout; an untrusted advertisement is refused at bind.
func TestClevisTang(t *testing.T) {
	tg := startTang(t)
	f := newImage(t)
	ctx := ctxT(t)
	theirSlot := f.clevisBind(t, nil, "tang", tangCfg(tg.url))
	h := f.open(t)
	theirID, _ := tokenFor(t, h, theirSlot)
	pass, id, err := Unlock(ctx, h, Options{TokenID: &theirID})
	if err != nil {
		t.Fatalf("Unlock of clevis's tang binding: %v", err)
	}
	if id != theirID {
		t.Fatalf("token %d unlocked, want %d", id, theirID)
	}
	if want := f.clevisPass(t, nil, theirSlot); !bytes.Equal(pass, want) {
		t.Fatalf("Unlock gives a passphrase other than clevis luks pass's")
	}
	if !f.cryptsetupAcceptsSlot(t, pass, theirSlot) {
		t.Fatal("cryptsetup refuses the passphrase")
	}

	// Untrusted: no thp, no adv, no TrustTang.
	if _, _, err := BindClevis(ctx, h, "tang", []byte(tangCfg(tg.url)), ClevisBindOptions{EnrollOptions: EnrollOptions{Existing: f.pass}}); !errors.Is(err, ErrUntrusted) {
		t.Fatalf("bind without trust: %v, want ErrUntrusted", err)
	}
	// A thp no key of the server has: tang answers 404 for its
	// advertisement, as clevis's curl sees it.
	if _, _, err := BindClevis(ctx, h, "tang", []byte(`{"url":"`+tg.url+`","thp":"AAAA"}`), ClevisBindOptions{EnrollOptions: EnrollOptions{Existing: f.pass}}); !errors.Is(err, ErrTangAnswer) {
		t.Fatalf("bind with a foreign thp: %v, want ErrTangAnswer", err)
	}
	if got := f.activeSlots(t); len(got) != 2 {
		t.Fatalf("a refused bind left keyslots %v", got)
	}
	// Trusted by the signing key's thumbprint, as tangd-keygen names it.
	slot, ourID, err := BindClevis(ctx, h, "tang", []byte(`{"url":"`+tg.url+`","thp":"`+tg.sigThp+`"}`), ClevisBindOptions{EnrollOptions: EnrollOptions{Existing: f.pass}})
	if err != nil {
		t.Fatalf("BindClevis tang: %v", err)
	}
	theirs := f.clevisPass(t, nil, slot)
	if len(theirs) < 40 || !f.cryptsetupAcceptsSlot(t, theirs, slot) {
		t.Fatalf("cryptsetup refuses keyslot %d with the passphrase clevis luks pass prints (%d bytes)", slot, len(theirs))
	}
	ours, id, err := Unlock(ctx, h, Options{TokenID: &ourID})
	if err != nil || id != ourID || !bytes.Equal(ours, theirs) {
		t.Fatalf("Unlock of our binding: token %d, %v; same passphrase as clevis: %v", id, err, bytes.Equal(ours, theirs))
	}

	f.sameListing(t, nil, h)
	if err := UnbindClevis(ctx, h, 0, false); !errors.Is(err, blkcrypt.ErrInvalidOptions) {
		t.Fatalf("unbinding keyslot 0, which has no binding: %v", err)
	}
	if err := UnbindClevis(ctx, h, slot, false); err != nil {
		t.Fatalf("UnbindClevis: %v", err)
	}
	if slices.Contains(f.activeSlots(t), slot) {
		t.Fatalf("keyslot %d stays after UnbindClevis", slot)
	}
	if toks, _ := h.Tokens(ctx); toks[ourID] != nil {
		t.Fatalf("token %d stays after UnbindClevis", ourID)
	}
	f.sameListing(t, nil, h)

	// Tang stopped: a one-line error naming the token and the server,
	// within the timeout.
	tg.stop()
	start := time.Now()
	_, _, err = Unlock(ctx, h, Options{TokenType: TypeClevis, TangTimeout: 2 * time.Second})
	if !errors.Is(err, ErrTangUnreachable) || !strings.Contains(err.Error(), "token "+strconv.Itoa(theirID)) {
		t.Fatalf("Unlock with tang stopped: %v", err)
	}
	if strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), tg.url) {
		t.Fatalf("the error is not one line naming the server: %q", err)
	}
	if d := time.Since(start); d > time.Minute {
		t.Fatalf("Unlock took %v with tang stopped", d)
	}
	t.Logf("tang stopped: %v", err)
}

// TestClevisTangBadServer: JWEs bound (with tang's real advertisement)
// to a server that forwards to tang decrypt; servers that answer
// garbage, an error status, a point off the curve, a valid point that
// is not this exchange's answer, too much, or nothing at all are refused
// with a one-line ErrTangAnswer or ErrTangUnreachable; an ended context
// stops the wait; nothing listening is ErrTangUnreachable.
func TestClevisTangBadServer(t *testing.T) {
	tg := startTang(t)
	ctx := ctxT(t)
	rsp, err := http.Get(tg.url + "/adv")
	if err != nil {
		t.Fatal(err)
	}
	var adv bytes.Buffer
	adv.ReadFrom(rsp.Body)
	rsp.Body.Close()
	var replay []byte // a real answer to an earlier request
	forward := func(w http.ResponseWriter, r *http.Request) {
		rsp, err := http.Post(tg.url+r.URL.Path, "application/jwk+json", r.Body)
		if err != nil {
			w.WriteHeader(502)
			return
		}
		defer rsp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(rsp.Body)
		replay = b.Bytes()
		w.WriteHeader(rsp.StatusCode)
		w.Write(replay)
	}
	hang := make(chan struct{})
	defer close(hang)
	bind := func(t *testing.T, url string) string {
		jwe, err := EncryptClevis(ctx, "tang", []byte(`{"url":"`+url+`","adv":`+adv.String()+`}`), []byte("secret"), ClevisOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return jwe
	}
	cases := []struct {
		name    string
		handler http.HandlerFunc
		want    error
	}{
		{"forward", forward, nil},
		{"garbage", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("<html>hello</html>")) }, ErrTangAnswer},
		{"404", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(404) }, ErrTangAnswer},
		{"off-curve", func(w http.ResponseWriter, r *http.Request) {
			x := base64.RawURLEncoding.EncodeToString(make([]byte, 66))
			fmt.Fprintf(w, `{"kty":"EC","crv":"P-521","x":"%s","y":"%s"}`, x, x)
		}, ErrTangAnswer},
		{"other-curve", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, `{"kty":"EC","crv":"P-256","x":"AA","y":"AA"}`)
		}, ErrTangAnswer},
		{"replayed-point", func(w http.ResponseWriter, r *http.Request) { w.Write(replay) }, ErrTangAnswer},
		{"huge", func(w http.ResponseWriter, r *http.Request) { w.Write(bytes.Repeat([]byte(" "), maxTangBody+10)) }, ErrTangAnswer},
		{"silent", func(w http.ResponseWriter, r *http.Request) { wait(r, hang) }, ErrTangUnreachable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			pt, err := DecryptClevis(ctx, bind(t, srv.URL), ClevisOptions{TangTimeout: time.Second})
			if tc.want == nil {
				if err != nil || string(pt) != "secret" {
					t.Fatalf("through a forwarding server: %q, %v", pt, err)
				}
				return
			}
			if !errors.Is(err, tc.want) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), srv.URL) {
				t.Fatalf("%v, want %v on one line naming the server", err, tc.want)
			}
			t.Logf("%v", err)
		})
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { wait(r, hang) }))
	defer srv.Close()
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if _, err := DecryptClevis(cctx, bind(t, srv.URL), ClevisOptions{TangTimeout: time.Hour}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an ended context: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String()
	l.Close()
	if _, err := DecryptClevis(ctx, bind(t, down), ClevisOptions{}); !errors.Is(err, ErrTangUnreachable) {
		t.Fatalf("nothing listening: %v", err)
	}
}

// wait blocks a handler until the test ends or the client goes away.
func wait(r *http.Request, hang chan struct{}) {
	// The server notices a client that left only once the body is read.
	io.Copy(io.Discard, r.Body)
	select {
	case <-hang:
	case <-r.Context().Done():
	}
}

// TestClevisTPM2: clevis's tpm2 pin over swtpm (TPM2TOOLS_TCTI), with a
// PCR 7 policy and without PCRs: its bindings unlock through Unlock; ours
// are read by clevis luks pass and accepted by cryptsetup; after PCR 7
// changes, the PCR-bound tokens are refused with a PCR message.
func TestClevisTPM2(t *testing.T) {
	testenv.Need(t, "clevis-encrypt-tpm2", "clevis-tpm2")
	tpm := startSwtpm(t)
	tpm.extendPCR7(t)
	env := []string{"TPM2TOOLS_TCTI=" + tpm.tcti}
	f := newImage(t)
	ctx := ctxT(t)
	theirPCR := f.clevisBind(t, env, "tpm2", `{"pcr_bank":"sha256","pcr_ids":"7"}`)
	theirPlain := f.clevisBind(t, env, "tpm2", `{}`)
	h := f.open(t)
	for _, slot := range []int{theirPCR, theirPlain} {
		id, _ := tokenFor(t, h, slot)
		pass, got, err := Unlock(ctx, h, Options{TPM2Device: tpm.tcti, TokenID: &id})
		if err != nil || got != id {
			t.Fatalf("Unlock of clevis's tpm2 binding in keyslot %d: %v", slot, err)
		}
		if want := f.clevisPass(t, env, slot); !bytes.Equal(pass, want) {
			t.Fatalf("keyslot %d: Unlock gives another passphrase than clevis luks pass", slot)
		}
	}
	ourPCR, ourPCRID, err := BindClevis(ctx, h, "tpm2", []byte(`{"pcr_ids":[7]}`), ClevisBindOptions{EnrollOptions: EnrollOptions{Existing: f.pass}, ClevisOptions: ClevisOptions{TPM2Device: tpm.tcti}})
	if err != nil {
		t.Fatalf("BindClevis tpm2: %v", err)
	}
	ourPlain, _, err := BindClevis(ctx, h, "tpm2", []byte(`{"key":"rsa"}`), ClevisBindOptions{EnrollOptions: EnrollOptions{Existing: f.pass}, ClevisOptions: ClevisOptions{TPM2Device: tpm.tcti}})
	if err != nil {
		t.Fatalf("BindClevis tpm2 (rsa, no PCRs): %v", err)
	}
	f.sameListing(t, env, h)
	for _, slot := range []int{ourPCR, ourPlain} {
		theirs := f.clevisPass(t, env, slot)
		if !f.cryptsetupAcceptsSlot(t, theirs, slot) {
			t.Fatalf("cryptsetup refuses keyslot %d with what clevis luks pass prints", slot)
		}
	}
	tpm.extendPCR7(t)
	for _, id := range []int{func() int { id, _ := tokenFor(t, h, theirPCR); return id }(), ourPCRID} {
		_, _, err := Unlock(ctx, h, Options{TPM2Device: tpm.tcti, TokenID: &id})
		if !errors.Is(err, ErrPCRMismatch) || !strings.Contains(err.Error(), fmt.Sprintf("token %d", id)) {
			t.Fatalf("token %d after PCR 7 changed: %v", id, err)
		}
		t.Logf("%v", err)
	}
	// The token without PCRs still opens.
	id, _ := tokenFor(t, h, theirPlain)
	if _, _, err := Unlock(ctx, h, Options{TPM2Device: tpm.tcti, TokenID: &id}); err != nil {
		t.Fatalf("the PCR-less binding after PCR 7 changed: %v", err)
	}
}

// TestClevisSSS: sss 2 of 3 over two tang servers and the tpm2 pin, both
// ways: clevis's binding unlocks through Unlock with one tang down, and
// fails with a threshold message naming both failures with both down;
// ours is read by clevis luks pass.
func TestClevisSSS(t *testing.T) {
	testenv.Need(t, "clevis-encrypt-tpm2", "clevis-tpm2")
	t1, t2 := startTang(t), startTang(t)
	tpm := startSwtpm(t)
	env := []string{"TPM2TOOLS_TCTI=" + tpm.tcti}
	cfg := `{"t":2,"pins":{"tang":[{"url":"` + t1.url + `"},{"url":"` + t2.url + `"}],"tpm2":{}}}`
	f := newImage(t)
	ctx := ctxT(t)
	theirs := f.clevisBind(t, env, "sss", cfg)
	h := f.open(t)
	ours, ourID, err := BindClevis(ctx, h, "sss", []byte(cfg), ClevisBindOptions{EnrollOptions: EnrollOptions{Existing: f.pass}, ClevisOptions: ClevisOptions{TPM2Device: tpm.tcti, TrustTang: true}})
	if err != nil {
		t.Fatalf("BindClevis sss: %v", err)
	}
	clevisOurs := f.clevisPass(t, env, ours)
	if !f.cryptsetupAcceptsSlot(t, clevisOurs, ours) {
		t.Fatal("cryptsetup refuses what clevis luks pass prints for our sss binding")
	}
	f.sameListing(t, env, h)
	theirID, _ := tokenFor(t, h, theirs)
	clevisTheirs := f.clevisPass(t, env, theirs)
	t1.stop()
	for _, c := range []struct {
		id   int
		want []byte
	}{{theirID, clevisTheirs}, {ourID, clevisOurs}} {
		pass, _, err := Unlock(ctx, h, Options{TPM2Device: tpm.tcti, TokenID: &c.id, TangTimeout: 2 * time.Second})
		if err != nil || !bytes.Equal(pass, c.want) {
			t.Fatalf("token %d with one tang down: %v", c.id, err)
		}
	}
	t2.stop()
	_, _, err = Unlock(ctx, h, Options{TPM2Device: tpm.tcti, TokenID: &theirID, TangTimeout: 2 * time.Second})
	if !errors.Is(err, ErrThreshold) || !errors.Is(err, ErrTangUnreachable) || strings.Count(err.Error(), "unreachable") != 2 || strings.Contains(err.Error(), "\n") {
		t.Fatalf("both tang down: %v", err)
	}
	t.Logf("%v", err)
}
