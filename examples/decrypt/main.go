// Command decrypt opens a disk-encryption volume of any format blkcrypt
// knows (detected, or named with -type) with a passphrase read from
// standard input, and prints its type, size and the SHA-256 of its
// plaintext. The passphrase is never taken from argv, where other users
// could read it.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/blkcrypt/blkcrypt"
)

func main() {
	typ := flag.String("type", "", "volume type (empty: detect)")
	flag.Usage = func() { fmt.Fprintln(os.Stderr, "usage: decrypt [-type T] IMAGE < passphrase") }
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, flag.Arg(0), *typ); err != nil {
		fmt.Fprintln(os.Stderr, "decrypt:", err)
		if errors.Is(err, blkcrypt.ErrWrongPassphrase) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, path, typ string) error {
	line, err := bufio.NewReader(os.Stdin).ReadBytes('\n')
	if err != nil && err != io.EOF {
		return err
	}
	pass := bytes.TrimSuffix(line, []byte("\n"))
	defer clear(line)
	v, err := blkcrypt.Open(ctx, path, blkcrypt.OpenOptions{Type: typ, Passphrase: pass, ReadOnly: true})
	if err != nil {
		return err
	}
	defer v.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(v, 0, v.Size())); err != nil {
		return err
	}
	fmt.Printf("type %s\nsize %d\nsha256 %s\n", v.Type(), v.Size(), hex.EncodeToString(h.Sum(nil)))
	return nil
}
