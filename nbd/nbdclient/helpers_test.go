package nbdclient

import (
	"context"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/nbd/nbdclient/nbdtest"
)

func startNbdkit(t testing.TB, tcp bool, args ...string) *nbdtest.Server {
	t.Helper()
	return nbdtest.Nbdkit(t, tcp, args...)
}

func dialT(t testing.TB, uri string, o Options) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, uri, o)
	if err != nil {
		t.Fatalf("Dial(%s): %v", uri, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
