// Package oracle runs OpenSSL's libcrypto as an independent oracle for
// tests: a small C program, compiled at test time, answers encryption
// requests over a pipe. blkcrypt's own code never computes the expected
// values.
package oracle

import (
	"bufio"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

//go:embed oracle.c.in
var source []byte

// Oracle is a running oracle process.
type Oracle struct {
	mu  sync.Mutex
	in  *bufio.Writer
	out *bufio.Reader
	cmd *exec.Cmd
}

// New compiles and starts the oracle, failing the test with a clear message
// if gcc or libcrypto's headers (Debian: gcc, libssl-dev) are missing.
func New(t testing.TB) *Oracle {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "oracle.c")
	bin := filepath.Join(dir, "oracle")
	if err := os.WriteFile(src, source, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Fatalf("the OpenSSL oracle needs gcc (apt-get install gcc libssl-dev): %v", err)
	}
	if out, err := exec.Command("gcc", "-O2", "-o", bin, src, "-lcrypto").CombinedOutput(); err != nil {
		t.Fatalf("building the OpenSSL oracle failed (apt-get install libssl-dev): %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	w, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	r, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	o := &Oracle{in: bufio.NewWriter(w), out: bufio.NewReaderSize(r, 1<<22), cmd: cmd}
	t.Cleanup(func() { w.Close(); cmd.Wait() })
	return o
}

// Crypt encrypts (enc) or decrypts data with an OpenSSL cipher name such as
// "aes-256-xts", "aes-128-cbc" or "aes-256-ecb"; iv may be nil.
func (o *Oracle) Crypt(cipher string, key, iv, data []byte, enc bool) ([]byte, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	dir := "DEC"
	if enc {
		dir = "ENC"
	}
	ivh := "-"
	if len(iv) > 0 {
		ivh = hex.EncodeToString(iv)
	}
	fmt.Fprintf(o.in, "%s %s %x %s %x\n", cipher, dir, key, ivh, data)
	if err := o.in.Flush(); err != nil {
		return nil, err
	}
	line, err := o.out.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSpace(line)
	if strings.HasPrefix(line, "ERR") {
		return nil, fmt.Errorf("oracle: %s for %s", line, cipher)
	}
	return hex.DecodeString(line)
}
