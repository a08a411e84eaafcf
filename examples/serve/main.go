// Command serve opens a volume with a passphrase read from standard input
// and serves its plaintext over NBD on a Unix socket, until SIGINT or
// SIGTERM; then it finishes the requests in flight, flushes and closes the
// volume. Any NBD client can use it: nbdinfo, nbdcopy, qemu-img, the
// kernel's nbd-client.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/nbd"
)

func main() {
	socket := flag.String("socket", "", "Unix socket to listen on")
	flag.Usage = func() { fmt.Fprintln(os.Stderr, "usage: serve -socket PATH IMAGE < passphrase") }
	flag.Parse()
	if flag.NArg() != 1 || *socket == "" {
		flag.Usage()
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, flag.Arg(0), *socket); err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, path, socket string) error {
	line, err := bufio.NewReader(os.Stdin).ReadBytes('\n')
	if err != nil && err != io.EOF {
		return err
	}
	pass := bytes.TrimSuffix(line, []byte("\n"))
	v, err := blkcrypt.Open(ctx, path, blkcrypt.OpenOptions{Passphrase: pass})
	clear(line)
	if err != nil {
		return err
	}
	l, err := net.Listen("unix", socket)
	if err != nil {
		v.Close()
		return err
	}
	// MultiConn is safe: Volume.Flush makes every completed write durable,
	// whichever connection it came from.
	srv := nbd.NewServer(v, nbd.Options{MultiConn: true})
	fmt.Println("ready")
	err = srv.Serve(ctx, l)
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if serr := srv.Shutdown(sctx); err == nil || errors.Is(err, nbd.ErrServerClosed) {
		err = serr
	}
	if cerr := v.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, nbd.ErrServerClosed) || errors.Is(err, context.Canceled) {
		err = nil // a signal asked for the shutdown
	}
	return err
}
