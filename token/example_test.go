package token_test

import (
	"context"
	"fmt"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/token"
)

// Unlock a volume systemd-cryptenroll bound to the machine's TPM, asking
// for nothing: the token's passphrase opens the volume as a typed one
// would.
func ExampleUnlock() {
	ctx := context.Background()
	h, err := blkcrypt.OpenLUKS(ctx, "disk.img", blkcrypt.LUKSOptions{ReadOnly: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	pass, id, err := token.Unlock(ctx, h, token.Options{TPM2Device: "device:/dev/tpmrm0"})
	h.Close()
	if err != nil {
		fmt.Println(err) // e.g. token 0 (systemd-tpm2): the PCR values do not match the policy: PCRs 7 in bank sha256
		return
	}
	defer clear(pass)
	v, err := blkcrypt.Open(ctx, "disk.img", blkcrypt.OpenOptions{Passphrase: pass})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer v.Close()
	fmt.Println("opened with token", id)
}
