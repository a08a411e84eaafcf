package bitlk

import (
	"fmt"
	"io"
	"strings"
)

// Dump writes the metadata as cryptsetup's bitlkDump prints it. device is
// the name shown in the first line. The creation time is local time, as
// ctime(3) gives it.
func Dump(w io.Writer, m *Metadata, device string) error {
	var b strings.Builder
	togo := ""
	if m.ToGo {
		togo = " To Go"
	}
	desc := m.Description
	if desc == "" {
		desc = "(null)"
	}
	fmt.Fprintf(&b, "Info for BITLK%s device %s.\n", togo, device)
	fmt.Fprintf(&b, "Version:      \t%d\n", m.Version)
	fmt.Fprintf(&b, "GUID:         \t%s\n", m.GUID)
	fmt.Fprintf(&b, "Sector size:  \t%d [bytes]\n", m.SectorSize)
	fmt.Fprintf(&b, "Volume size:  \t%d [bytes]\n", m.VolumeSize)
	fmt.Fprintf(&b, "Created:      \t%s\n", m.Created.Local().Format("Mon Jan _2 15:04:05 2006"))
	fmt.Fprintf(&b, "Description:  \t%s\n", desc)
	fmt.Fprintf(&b, "Cipher name:  \t%s\n", m.Cipher)
	fmt.Fprintf(&b, "Cipher mode:  \t%s\n", m.CipherMode)
	fmt.Fprintf(&b, "Cipher key:   \t%d [bits]\n", m.KeyBits)
	fmt.Fprintf(&b, "\nKeyslots:\n")
	for i := range m.VMKs {
		v := &m.VMKs[i]
		fmt.Fprintf(&b, " %d: VMK\n", i)
		if v.Name != "" {
			fmt.Fprintf(&b, "\tName:       \t%s\n", v.Name)
		}
		fmt.Fprintf(&b, "\tGUID:       \t%s\n", v.GUID)
		fmt.Fprintf(&b, "\tProtection: \t%s\n", v.Protection)
		fmt.Fprintf(&b, "\tSalt:       \t%x\n", v.Salt[:])
		for _, n := range v.KeySizes() {
			fmt.Fprintf(&b, "\tKey data size:\t%d [bytes]\n", n)
		}
	}
	fmt.Fprintf(&b, " %d: FVEK\n", len(m.VMKs))
	fmt.Fprintf(&b, "\tKey data size:\t%d [bytes]\n", m.FVEKSize())
	fmt.Fprintf(&b, "\nMetadata segments:\n")
	for i, o := range m.MetadataOffsets {
		fmt.Fprintf(&b, " %d: FVE metadata area\n", i)
		fmt.Fprintf(&b, "\tOffset: \t%d [bytes]\n", o)
		fmt.Fprintf(&b, "\tSize:   \t%d [bytes]\n", fveAreaSize)
	}
	fmt.Fprintf(&b, " 3: Volume header\n")
	fmt.Fprintf(&b, "\tOffset: \t%d [bytes]\n", m.VolumeHeaderOffset)
	fmt.Fprintf(&b, "\tSize:   \t%d [bytes]\n", m.VolumeHeaderSize)
	fmt.Fprintf(&b, "\tCipher: \t%s\n", m.CipherSpec())
	_, err := io.WriteString(w, b.String())
	return err
}

// DumpVolumeKey writes what bitlkDump --dump-volume-key prints. If
// keyFile is not empty the key was stored there and is not printed.
func DumpVolumeKey(w io.Writer, m *Metadata, device string, key []byte, keyFile string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "BITLK header information for %s\n", device)
	fmt.Fprintf(&b, "Cipher name:   \t%s\n", m.Cipher)
	fmt.Fprintf(&b, "Cipher mode:   \t%s\n", m.CipherMode)
	fmt.Fprintf(&b, "UUID:          \t%s\n", m.GUID)
	fmt.Fprintf(&b, "MK bits:       \t%d\n", len(key)*8)
	if keyFile != "" {
		fmt.Fprintf(&b, "Key stored to file %s.\n", keyFile)
	} else {
		b.WriteString("MK dump:\t")
		for i, c := range key {
			if i > 0 && i%16 == 0 {
				b.WriteString("\n\t\t")
			}
			fmt.Fprintf(&b, "%02x ", c)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
