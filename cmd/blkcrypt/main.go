// Command blkcrypt opens, creates and serves Linux disk-encryption volumes
// (dm-crypt plain, LUKS1, LUKS2) in userspace. Run blkcrypt --help.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/blkcrypt/blkcrypt/internal/cli"
	"golang.org/x/term"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	env := &cli.Env{
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		StdinIsTerminal:  term.IsTerminal(int(os.Stdin.Fd())),
		StderrIsTerminal: term.IsTerminal(int(os.Stderr.Fd())),
		Prompt: func(prompt string) ([]byte, error) {
			os.Stderr.WriteString(prompt)
			defer os.Stderr.WriteString("\n")
			return term.ReadPassword(int(os.Stdin.Fd()))
		},
	}
	code := cli.Main(ctx, os.Args[1:], env)
	stop()
	os.Exit(code)
}
