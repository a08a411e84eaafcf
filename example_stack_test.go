package blkcrypt_test

import (
	"context"
	"fmt"
	"io/fs"
	"log"
	"os"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/fsys"
)

// ExampleOpenStack reads /etc/fstab from a Debian "encrypted LVM" disk
// image: partition 3 (LUKS2) → vg0/root (ext4), without root, loop
// devices or device-mapper. The passphrase is asked for only once the
// library has found something to unlock.
func ExampleOpenStack() {
	ctx := context.Background()
	s, err := blkcrypt.OpenStack(ctx, "disk.img", blkcrypt.StackOptions{
		Partition: "PARTLABEL=cryptroot",
		Open: blkcrypt.OpenOptions{Prepare: func(typ string, o *blkcrypt.OpenOptions) error {
			pw, err := os.ReadFile("passphrase.txt") // or a prompt naming typ
			o.Passphrase = pw
			return err
		}},
		LV:       "vg0/root",
		ReadOnly: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	root, _, err := fsys.Open(s, s.Size())
	if err != nil {
		log.Fatal(err)
	}
	fstab, err := fs.ReadFile(root, "etc/fstab")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s", fstab)
}
