//go:build !linux

package cli

import (
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/imagetest"
)

// The image tests need lvm2 on loop devices and FUSE: Linux only.
func testImageMount(t *testing.T, d *imagetest.Debian)   { t.Skip("FUSE mounts are tested on Linux") }
func testImageGateway(t *testing.T, d *imagetest.Debian) { t.Skip("tested on Linux with the mount") }
