package fvault2

import (
	"context"
	"os"

	"github.com/blkcrypt/blkcrypt/internal/volspec"
	"github.com/blkcrypt/blkcrypt/internal/volspec/voltest"
)

// OpenFile is the registered opener over the file at path.
func OpenFile(path string, passphrase []byte, readOnly bool) (*voltest.Volume, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	s, err := open(context.Background(), &volspec.Request{Dev: f, DevSize: st.Size(), Passphrase: passphrase})
	if err != nil {
		f.Close()
		return nil, err
	}
	return voltest.Open(f, s, readOnly), nil
}
