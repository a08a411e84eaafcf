package capi

import (
	"fmt"
	"io"
	"strings"
)

// CommonAlgs are the transforms cryptsetup volumes use: what WriteProc
// instantiates when given no names.
var CommonAlgs = []string{
	"ecb(aes)", "cbc(aes)", "ctr(aes)", "xts(aes)", "lrw(aes)", "essiv(cbc(aes),sha256)",
	"cbc(serpent)", "xts(serpent)", "cbc(twofish)", "xts(twofish)",
	"adiantum(xchacha12,aes)", "sha1", "sha256", "sha512", "ripemd160", "wp512",
}

// WriteProc instantiates every driver of each name (CommonAlgs when
// names is empty), self-tests them, and writes every registered driver
// known so far to w in the layout of Linux's /proc/crypto. An unknown
// name is an error, before anything is written.
func WriteProc(w io.Writer, names []string) error {
	if len(names) == 0 {
		names = CommonAlgs
	}
	for _, n := range names {
		ds, err := Drivers(n)
		if err != nil {
			return err
		}
		for _, d := range ds {
			d.SelfTest() //nolint:errcheck // SelfTestState reports it
		}
	}
	for _, a := range List() {
		fmt.Fprintf(w, "name         : %s\ndriver       : %s\npriority     : %d\ntype         : %s\nselftest     : %s\n",
			a.Name, a.Driver, a.Priority, a.Type, a.SelfTestState())
		switch a.Type {
		case TypeHash:
			fmt.Fprintf(w, "blocksize    : %d\ndigestsize   : %d\n", a.BlockSize, a.DigestSize)
		default:
			bits := make([]string, len(a.KeySizes))
			for i, k := range a.KeySizes {
				bits[i] = fmt.Sprint(k * 8)
			}
			fmt.Fprintf(w, "blocksize    : %d\nivsize       : %d\nkeysizes     : %s\n", a.BlockSize, a.IVSize, strings.Join(bits, " "))
		}
		if _, err := fmt.Fprintln(w); err != nil {
			return err
		}
	}
	return nil
}
