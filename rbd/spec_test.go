//go:build ceph && cgo && linux

package rbd

import (
	"errors"
	"testing"
)

func TestParseSpec(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Spec
	}{
		{"rbd:rbd/vol", Spec{Pool: "rbd", Image: "vol"}},
		{"rbd:pool2/vol-1@conf=/etc/ceph/other.conf", Spec{Pool: "pool2", Image: "vol-1", Conf: "/etc/ceph/other.conf"}},
	} {
		got, err := ParseSpec(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseSpec(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"rbd:", "rbd:vol", "rbd:/vol", "rbd:rbd/", "rbd:a/b/c", "rbd:rbd/vol@", "rbd:rbd/vol@id=admin", "rbd:rbd/vol@conf=", "nbd://x/"} {
		if _, err := ParseSpec(bad); !errors.Is(err, ErrBadSpec) {
			t.Errorf("ParseSpec(%q): %v, want ErrBadSpec", bad, err)
		}
	}
}
