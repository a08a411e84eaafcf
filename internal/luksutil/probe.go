package luksutil

import (
	"sort"
	"sync"
)

// Range is a byte range [Off, Off+Len) on a device.
type Range struct{ Off, Len int64 }

// End returns Off+Len.
func (r Range) End() int64 { return r.Off + r.Len }

// Overlaps reports whether r and o share a byte.
func (r Range) Overlaps(o Range) bool { return r.Off < o.End() && o.Off < r.End() }

// A Prober finds the byte ranges that an existing header on dev needs to
// stay unlockable: its metadata and the areas of its active keyslots. It
// returns nil when it finds no header of its kind.
type Prober func(dev Device) []Range

var probers struct {
	sync.Mutex
	list []Prober
}

// RegisterProber adds a prober; luks1 and luks2 register theirs at init.
func RegisterProber(p Prober) {
	probers.Lock()
	probers.list = append(probers.list, p)
	probers.Unlock()
}

// InUse returns what existing LUKS headers on dev occupy, so that a format
// over them can write its first keyslot elsewhere and switch headers in a
// single step: until the new header is written the old one still opens.
func InUse(dev Device) []Range {
	probers.Lock()
	list := append([]Prober(nil), probers.list...)
	probers.Unlock()
	var out []Range
	for _, p := range list {
		out = append(out, p(dev)...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Off < out[j].Off })
	return out
}

// OverlapsAny reports whether r overlaps any of rs.
func OverlapsAny(r Range, rs []Range) bool {
	for _, o := range rs {
		if r.Overlaps(o) {
			return true
		}
	}
	return false
}
