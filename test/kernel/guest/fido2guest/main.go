//go:build linux

// Command fido2guest runs in the kernel-test guest (test/kernel/fido2_test.go):
//
//	fido2guest uhid SEED [PIN [PROTOCOLS]]
//	                             internal/fido2test's software security key
//	                             behind /dev/uhid, until killed; PROTOCOLS
//	                             are its PIN/UV auth protocols ("2", "2,1")
//	fido2guest unlock DEVICE     blkcrypt's systemd-fido2 unlock through the
//	                             key's /dev/hidrawN (PIN from $PIN); prints
//	                             the passphrase, without a newline
//	fido2guest cache-pin PIN     puts PIN in the user-session keyring as
//	                             "fido2-pin", where systemd-cryptenroll 252
//	                             looks (ask-password's cache) before asking
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/fido2test"
	"github.com/blkcrypt/blkcrypt/token"
	"golang.org/x/sys/unix"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "fido2guest:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: fido2guest uhid SEED [PIN] | unlock DEVICE")
	}
	switch args[0] {
	case "uhid":
		pin := ""
		if len(args) > 2 {
			pin = args[2]
		}
		key := fido2test.New([]byte(args[1]), pin)
		if len(args) > 3 {
			key.Protocols = nil
			for _, f := range strings.Split(args[3], ",") {
				n, err := strconv.Atoi(f)
				if err != nil {
					return err
				}
				key.Protocols = append(key.Protocols, n)
			}
		}
		dev, err := os.OpenFile("/dev/uhid", os.O_RDWR, 0)
		if err != nil {
			return err
		}
		return fido2test.ServeUHID(dev, key, nil)
	case "cache-pin":
		_, err := unix.AddKey("user", "fido2-pin", []byte(args[1]), unix.KEY_SPEC_USER_SESSION_KEYRING)
		return err
	case "unlock":
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		h, err := blkcrypt.OpenLUKS(ctx, args[1], blkcrypt.LUKSOptions{})
		if err != nil {
			return err
		}
		defer h.Close()
		o := token.Options{FIDO2Device: "auto", TokenType: token.TypeFIDO2}
		if p, ok := os.LookupEnv("PIN"); ok {
			o.PIN = []byte(p)
		}
		pass, _, err := token.Unlock(ctx, h, o)
		if err != nil {
			return err
		}
		_, err = os.Stdout.Write(pass)
		return err
	}
	return fmt.Errorf("unknown command %q", args[0])
}
