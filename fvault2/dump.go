package fvault2

import (
	"fmt"
	"io"
	"strings"
)

// Dump writes the metadata as cryptsetup's fvault2Dump prints it. If key
// is not nil, the volume key follows (fvault2Dump --dump-volume-key).
func Dump(w io.Writer, m *Metadata, device string, key []byte) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Header information for FVAULT2 device %s.\n", device)
	fmt.Fprintf(&b, "Physical volume UUID: \t%s\n", m.PhysicalVolumeUUID)
	fmt.Fprintf(&b, "Family UUID:          \t%s\n", m.FamilyUUID)
	fmt.Fprintf(&b, "Logical volume offset:\t%d [bytes]\n", m.LogicalVolumeOffset)
	fmt.Fprintf(&b, "Logical volume size:  \t%d [bytes]\n", m.LogicalVolumeSize)
	fmt.Fprintf(&b, "Cipher:               \t%s\n", m.Cipher)
	fmt.Fprintf(&b, "Cipher mode:          \t%s\n", m.CipherMode)
	fmt.Fprintf(&b, "PBKDF2 iterations:    \t%d\n", m.PBKDF2Iterations)
	fmt.Fprintf(&b, "PBKDF2 salt:          \t%s\n", spacedHex(m.PBKDF2Salt[:]))
	if key != nil {
		fmt.Fprintf(&b, "Volume key:       \t%s\n", spacedHex(key))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func spacedHex(b []byte) string {
	var s strings.Builder
	for _, c := range b {
		fmt.Fprintf(&s, "%02x ", c)
	}
	return s.String()
}
