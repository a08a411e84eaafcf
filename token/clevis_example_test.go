package token_test

import (
	"context"
	"fmt"
	"time"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/token"
)

// Bind a volume to two tang servers and the TPM, any two of the three
// unlocking it (clevis luks bind -d disk.img sss CONFIG), then unlock it
// through its tokens with a bounded wait for the servers.
func ExampleBindClevis() {
	ctx := context.Background()
	h, err := blkcrypt.OpenLUKS(ctx, "disk.img", blkcrypt.LUKSOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Close()
	cfg := `{"t":2,"pins":{"tang":[{"url":"http://tang1","thp":"..."},{"url":"http://tang2","thp":"..."}],"tpm2":{"pcr_ids":"7"}}}`
	slot, id, err := token.BindClevis(ctx, h, "sss", []byte(cfg), token.ClevisBindOptions{
		EnrollOptions: token.EnrollOptions{Existing: []byte("passphrase")},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("keyslot", slot, "token", id)

	pass, _, err := token.Unlock(ctx, h, token.Options{TokenType: token.TypeClevis, TangTimeout: 5 * time.Second})
	if err != nil {
		// e.g. token 1 (clevis, pin sss): sss pin: threshold not met: 2 of 3 shares needed, 2 failed (share 1: tang server unreachable: …)
		fmt.Println(err)
		return
	}
	clear(pass)
}
