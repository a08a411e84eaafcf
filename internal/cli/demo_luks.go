package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

type demoOptions struct {
	Dir string  `flag:"dir" help:"directory for the demo image" def:"a new temporary directory"`
	Sec float64 `flag:"sec" help:"serve the demo volume this many seconds" def:"0 (until Enter on a terminal; else stop at once)"`
}

// runDemo is the README's first command: it formats a LUKS demo image, writes and reads data through the
// volume, shows the header, and serves it over NBD on 127.0.0.1, printing
// the client commands. It serves until interrupted when run from a
// terminal, otherwise for --sec seconds (default 0: just check the server
// answers and stop).
func runDemo(ctx context.Context, env *Env, o *demoOptions, _ []string) error {
	w := env.Stdout
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "blkcrypt-demo-")
		if err != nil {
			return err
		}
		dir = d
	}
	img := filepath.Join(dir, "demo.luks")
	pass := filepath.Join(dir, "passphrase")
	if err := os.WriteFile(pass, []byte("blkcrypt demo"), 0o600); err != nil {
		return err
	}
	typ := "luks2"
	os.Remove(img)
	step := func(desc string, args ...string) error {
		fmt.Fprintf(w, "\n$ blkcrypt %s\n", joinArgs(args))
		var out, errb bytes.Buffer
		sub := &Env{Stdin: bytes.NewReader(nil), Stdout: &out, Stderr: &errb}
		if code := Main(ctx, args, sub); code != 0 {
			return fmt.Errorf("%s failed (exit %d): %s", desc, code, bytes.TrimSpace(errb.Bytes()))
		}
		w.Write(out.Bytes())
		w.Write(errb.Bytes())
		return nil
	}
	fmt.Fprintf(w, "blkcrypt demo: a %s volume in %s (passphrase in %s)\n", typ, dir, pass)
	// A fast KDF keeps the demo quick; real volumes use the benchmarked default.
	if err := step("format", "format", img, "--type", typ, "--size", "67108864", "--key-file", pass, "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "-q"); err != nil {
		return err
	}
	if err := step("dump", "dump", img); err != nil {
		return err
	}
	msg := bytes.Repeat([]byte("hello from blkcrypt, encrypted like dm-crypt does it\n"), 1000)
	in := filepath.Join(dir, "hello.txt")
	os.WriteFile(in, msg, 0o600)
	if err := step("write", "write", img, "-i", in, "--key-file", pass); err != nil {
		return err
	}
	var out bytes.Buffer
	sub := &Env{Stdin: bytes.NewReader(nil), Stdout: &out, Stderr: io.Discard}
	if code := Main(ctx, []string{"read", img, "--key-file", pass, "--length", strconv.Itoa(len(msg))}, sub); code != 0 || !bytes.Equal(out.Bytes(), msg) {
		return fmt.Errorf("reading the demo data back failed")
	}
	sum := sha256.Sum256(msg)
	fmt.Fprintf(w, "\n$ blkcrypt read %s --key-file %s --length %d | sha256sum\n%x  -\n", img, pass, len(msg), sum)

	// Serve over NBD on a free loopback port.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := l.Addr().String()
	l.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		sub := &Env{Stdin: bytes.NewReader(nil), Stdout: io.Discard, Stderr: io.Discard}
		if code := Main(sctx, []string{"serve", img, "--key-file", pass, "--listen", addr}, sub); code != 0 {
			done <- fmt.Errorf("serve exited with %d", code)
			return
		}
		done <- nil
	}()
	if err := waitNBD(addr, done); err != nil {
		return err
	}
	_, port, _ := net.SplitHostPort(addr)
	fmt.Fprintf(w, "\n$ blkcrypt serve %s --key-file %s --listen %s\nserving the decrypted volume over NBD on %s. Try:\n", img, pass, addr, addr)
	fmt.Fprintf(w, "  nbdinfo nbd://127.0.0.1:%s\n", port)
	fmt.Fprintf(w, "  qemu-img convert -f raw -O raw nbd://127.0.0.1:%s copy.raw && head -c 100 copy.raw\n", port)
	fmt.Fprintf(w, "  nbdcopy nbd://127.0.0.1:%s - | head -c 100\n", port)
	fmt.Fprintf(w, "next: cryptsetup luksDump %s; cryptsetup open --test-passphrase --key-file %s %s\n", img, pass, img)
	secs := o.Sec
	switch {
	case env.StdinIsTerminal && secs == 0:
		fmt.Fprintln(w, "(Ctrl-C stops the server)")
		<-ctx.Done()
	case secs > 0:
		fmt.Fprintf(w, "(serving for %.0f s)\n", secs)
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(secs * float64(time.Second))):
		}
	default:
		fmt.Fprintln(w, "(not a terminal: the server answered and is stopped now; run `blkcrypt demo --sec 300` to keep it up)")
	}
	cancel()
	return <-done
}

// waitNBD waits until an NBD server greets on addr.
func waitNBD(addr string, done chan error) error {
	for i := 0; i < 100; i++ {
		select {
		case err := <-done:
			return fmt.Errorf("server stopped: %v", err)
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.SetDeadline(time.Now().Add(2 * time.Second))
			var magic [8]byte
			_, err = io.ReadFull(c, magic[:])
			c.Close()
			if err == nil && string(magic[:]) == "NBDMAGIC" {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("the NBD server on %s did not answer", addr)
}

func joinArgs(a []string) string {
	var b bytes.Buffer
	for i, s := range a {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(s)
	}
	return b.String()
}
