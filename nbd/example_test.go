package nbd_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/nbd"
)

// Serve a LUKS2 volume's plaintext over NBD. Any NBD client can then use
// it: `nbdinfo nbd://ADDR`, `nbdcopy nbd://ADDR out.raw`, qemu-img, or the
// kernel's nbd-client. Shutdown answers the requests in flight and flushes
// before it closes the connections; the volume is closed after it.
func Example() {
	dir, _ := os.MkdirTemp("", "nbd-example-")
	defer os.RemoveAll(dir)
	img := filepath.Join(dir, "disk.img")
	ctx := context.Background()
	if err := blkcrypt.Format(ctx, img, []byte("secret"), blkcrypt.FormatOptions{
		Size:  32 << 20,
		PBKDF: blkcrypt.PBKDFOptions{Type: "pbkdf2", Iterations: 1000},
	}); err != nil {
		fmt.Println(err)
		return
	}
	v, err := blkcrypt.Open(ctx, img, blkcrypt.OpenOptions{Passphrase: []byte("secret")})
	if err != nil {
		fmt.Println(err)
		return
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	// Volume.Flush makes every completed write durable, whichever
	// connection it came from, so multi-conn is safe.
	srv := nbd.NewServer(v, nbd.Options{MultiConn: true})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, l) }()

	// A client connects; the server greets it with the NBD magic.
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		fmt.Println(err)
		return
	}
	greeting := make([]byte, 18)
	if _, err := io.ReadFull(c, greeting); err != nil {
		fmt.Println(err)
	}
	fmt.Println(string(greeting[:8]))
	c.Close()

	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		fmt.Println(err)
	}
	fmt.Println(<-served)
	fmt.Println(v.Close())
	// Output:
	// NBDMAGIC
	// nbd: server closed
	// <nil>
}
