package tcrypt

import (
	"fmt"
	"io"
)

// Dump writes what cryptsetup's tcryptDump prints for the header.
func (h *Header) Dump(w io.Writer, device string) {
	kind := "TCRYPT"
	if h.Magic == MagicVera {
		kind = "VERACRYPT"
	}
	fmt.Fprintf(w, "%s header information for %s\n", kind, device)
	fmt.Fprintf(w, "Version:       \t%d\n", h.Version)
	fmt.Fprintf(w, "Driver req.:\t%x.%x\n", h.VersionTC>>8, h.VersionTC&0xff)
	fmt.Fprintf(w, "Flags:       \t0x%x\n", h.Flags)
	fmt.Fprintf(w, "Sector size:\t%d [bytes]\n", h.SectorSize)
	fmt.Fprintf(w, "MK offset:\t%d [bytes]\n", h.MKOffset)
	if h.VolumeSize != 0 {
		fmt.Fprintf(w, "Volume size:\t%d [bytes]\n", h.VolumeSize)
	}
	if h.HiddenVolumeSize != 0 {
		fmt.Fprintf(w, "Hidden size:\t%d [bytes]\n", h.HiddenVolumeSize)
	}
	if h.KDF.Name == "argon2id" {
		fmt.Fprintf(w, "PBKDF:\t\tArgon2id\n")
	} else {
		fmt.Fprintf(w, "PBKDF:\t\tPBKDF2\n")
		fmt.Fprintf(w, "PBKDF2 hash:\t%s\n", h.KDF.Hash)
	}
	fmt.Fprintf(w, "Cipher chain:\t%s\n", h.Chain.Name)
	fmt.Fprintf(w, "Cipher mode:\t%s\n", h.Chain.Mode)
	fmt.Fprintf(w, "MK bits:       \t%d\n", h.Chain.KeySize*8)
}

// DumpVolumeKey writes what cryptsetup's tcryptDump --dump-volume-key
// prints; payloadOffset is the data offset in 512-byte sectors.
func (h *Header) DumpVolumeKey(w io.Writer, device string, payloadOffset uint64) {
	k := h.VolumeKey()
	defer clear(k)
	fmt.Fprintf(w, "TCRYPT header information for %s\n", device)
	fmt.Fprintf(w, "Cipher chain:  \t%s\n", h.Chain.Name)
	fmt.Fprintf(w, "Cipher mode:   \t%s\n", h.Chain.Mode)
	fmt.Fprintf(w, "Payload offset:\t%d\n", int(payloadOffset))
	fmt.Fprintf(w, "MK bits:       \t%d\n", len(k)*8)
	fmt.Fprint(w, "MK dump:\t")
	for i := 0; i < len(k); i += 16 {
		if i > 0 {
			fmt.Fprint(w, "\t\t")
		}
		for j := i; j < min(i+16, len(k)); j++ {
			fmt.Fprintf(w, "%02x ", k[j])
		}
		fmt.Fprintln(w)
	}
}
