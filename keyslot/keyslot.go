// Package keyslot holds the options of a new LUKS keyslot that luks1 and
// luks2 share: the keyslot number, the KDF and its cost (package kdf), and
// the LUKS2 priority with its on-disk encoding.
package keyslot

import (
	"fmt"

	"github.com/blkcrypt/blkcrypt/kdf"
)

// Number is the keyslot a *int keyslot field names, or AnySlot for nil.
func Number(slot *int) int {
	if slot == nil {
		return AnySlot
	}
	return *slot
}

// AnySlot asks for any keyslot where a keyslot number is an argument (the
// Unlock and ChangeKey methods of luks1 and luks2): the first that
// unlocks, or the first free. In options types the zero value, a nil
// *int, means the same (see Options.Slot).
const AnySlot = -1

// Slot returns a pointer to n, for the *int keyslot fields of options
// types, whose nil zero value means "any keyslot":
// keyslot.Options{Slot: keyslot.Slot(3)}.
func Slot(n int) *int { return &n }

// Options configure a new keyslot (add-key, change-key, format). The zero
// value takes the first free keyslot with cryptsetup's KDF defaults.
type Options struct {
	// Slot is the keyslot number to use; nil (the zero value) takes the
	// first free one. Every options type of the module with a keyslot
	// field follows this rule: nil is any keyslot, Slot(n) keyslot n.
	Slot *int
	// PBKDF chooses the KDF and its cost (benchmarked unless forced).
	PBKDF kdf.Options
	// Priority is the LUKS2 keyslot priority; the zero value stores none
	// (the keyslot then counts as normal). LUKS1 has no priorities.
	Priority Priority
}

// Priority of a LUKS2 keyslot when the unlocker tries keyslots. The
// constants are not the on-disk numbers: see DiskValue.
type Priority int

// Priorities. PriorityUnset stores no "priority" field.
const (
	PriorityUnset  Priority = iota
	PriorityIgnore          // 0 on disk: never tried unless named
	PriorityNormal          // 1 on disk
	PriorityPrefer          // 2 on disk: tried first
)

// DiskValue returns the number LUKS2 metadata stores, or -1 for unset.
func (p Priority) DiskValue() int { return int(p) - 1 }

// PriorityFromDisk maps a stored number to a Priority (ok false if bogus).
func PriorityFromDisk(v int) (Priority, bool) {
	if v < 0 || v > 2 {
		return PriorityUnset, false
	}
	return Priority(v + 1), true
}

func (p Priority) String() string {
	switch p {
	case PriorityIgnore:
		return "ignored"
	case PriorityNormal, PriorityUnset:
		return "normal"
	case PriorityPrefer:
		return "prefer"
	}
	return fmt.Sprintf("priority(%d)", int(p))
}
