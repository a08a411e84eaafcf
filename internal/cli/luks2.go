package cli

import (
	"encoding/hex"
	"fmt"
	"io"
	"strings"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/luks2"
)

func doDumpLUKS2(w io.Writer, p *parsed, dev string, hh blkcrypt.Header) error {
	h, ok := hh.(*luks2.Header)
	if !ok {
		return usageErr("not a LUKS2 header")
	}
	if p.bool("dump-json-metadata") {
		_, err := w.Write(h.PrettyJSON())
		return err
	}
	if p.bool("json") {
		fmt.Fprintf(w, "%s\n", strings.TrimRight(string(h.JSON()), "\x00"))
		return nil
	}
	orNone := func(s, none string) string {
		if s == "" {
			return none
		}
		return s
	}
	cfg := h.Config()
	fmt.Fprintf(w, "LUKS header information\nVersion:       \t2\nEpoch:         \t%d\nMetadata area: \t%d [bytes]\nKeyslots area: \t%d [bytes]\n",
		h.SeqID(), h.MetadataSize(), h.KeyslotsSize())
	fmt.Fprintf(w, "UUID:          \t%s\nLabel:         \t%s\nSubsystem:     \t%s\nFlags:       \t%s\n",
		h.UUID(), orNone(h.Label(), "(no label)"), orNone(h.Subsystem(), "(no subsystem)"), orNone(strings.Join(cfg.Flags, " "), "(no flags)"))
	if len(cfg.Requirements) > 0 {
		fmt.Fprintf(w, "Requirements:\t%s\n", strings.Join(cfg.Requirements, " "))
	}
	fmt.Fprintf(w, "\nData segments:\n")
	for _, s := range h.Segments() {
		fmt.Fprintf(w, "  %d: %s\n\toffset: %d [bytes]\n", s.ID, s.Type, s.Offset)
		if s.Dynamic {
			fmt.Fprintf(w, "\tlength: (whole device)\n")
		} else {
			fmt.Fprintf(w, "\tlength: %d [bytes]\n", s.Size)
		}
		if s.Type == "crypt" {
			fmt.Fprintf(w, "\tcipher: %s\n\tsector: %d [bytes]\n", s.Encryption, s.SectorSize)
		}
		if len(s.Flags) > 0 {
			fmt.Fprintf(w, "\tflags : %s\n", strings.Join(s.Flags, " "))
		}
	}
	fmt.Fprintf(w, "\nKeyslots:\n")
	for _, k := range h.Keyslots() {
		if st := h.ReencryptionStatus(); st != nil && st.Keyslot == k.ID {
			dumpReencryptKeyslot(w, k, st)
			continue
		}
		fmt.Fprintf(w, "  %d: %s%s\n", k.ID, k.Type, unboundMark(h, k))
		if k.Digest < 0 {
			fmt.Fprintf(w, "\tKey:        %d bits (unbound)\n", k.KeySize*8)
		} else {
			fmt.Fprintf(w, "\tKey:        %d bits\n", k.KeySize*8)
		}
		prio := k.Priority.String()
		if k.Priority == luks2.PriorityInvalid {
			prio = "invalid" // a stored number other than 0-2, as cryptsetup prints it
		}
		fmt.Fprintf(w, "\tPriority:   %s\n\tCipher:     %s\n\tCipher key: %d bits\n\tPBKDF:      %s\n", prio, k.AreaEncryption, k.AreaKeySize*8, strings.ToLower(k.KDF.Type))
		if strings.EqualFold(k.KDF.Type, "pbkdf2") {
			fmt.Fprintf(w, "\tHash:       %s\n\tIterations: %d\n", k.KDF.Hash, k.KDF.Iterations)
		} else {
			fmt.Fprintf(w, "\tTime cost:  %d\n\tMemory:     %d\n\tThreads:    %d\n", k.KDF.Iterations, k.KDF.MemoryKiB, k.KDF.Parallel)
		}
		fmt.Fprint(w, "\tSalt:       ")
		hexDump(w, k.KDFSalt, "\t            ")
		fmt.Fprintf(w, "\tAF stripes: %d\n\tAF hash:    %s\n\tArea offset:%d [bytes]\n\tArea length:%d [bytes]\n", k.AFStripes, k.AFHash, k.AreaOffset, k.AreaSize)
		if k.Digest >= 0 {
			fmt.Fprintf(w, "\tDigest ID:  %d\n", k.Digest)
		}
	}
	dumpTokens(w, h)
	fmt.Fprintf(w, "Digests:\n")
	for _, d := range h.Digests() {
		fmt.Fprintf(w, "  %d: %s\n\tHash:       %s\n\tIterations: %d\n\tSalt:       ", d.ID, d.Type, d.Hash, d.Iterations)
		hexDump(w, d.Salt, "\t            ")
		fmt.Fprint(w, "\tDigest:     ")
		hexDump(w, d.Value, "\t            ")
	}
	_ = hex.EncodeToString
	return nil
}
