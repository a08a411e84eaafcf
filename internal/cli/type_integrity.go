package cli

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/integrity"
)

// --type integrity: standalone dm-integrity volumes, as integritysetup's
// open and dump, through the format registry (typeBindings:
// integrityOptions; typeDumpers: dumpType; both in rw.go). The superblock gives the
// layout; what it does not record comes from integritysetup's flags (the
// integrityFlags group): the tag algorithm (--integrity, default crc32c)
// and its key file, the journal's MAC and encryption with theirs, and the
// write mode (journal by default, --integrity-bitmap-mode,
// --integrity-no-journal). Every read is checked: a sector whose tag does
// not match fails the request with the sector named (exit 4; NBD EIO).
// integritysetup format is formatIntegrity below (format --type
// integrity).

// integrityFlags are integritysetup's options of an existing volume:
// openFlags embeds them for the verbs that open one (read, write, serve,
// mount, dump).
type integrityFlags struct {
	Integrity string `flag:"integrity" help:"integrity: tag algorithm: crc32c, crc32, sha1, sha256, sha512, hmac-sha1, hmac-sha256, hmac-sha512" def:"crc32c"`
	integrityKeyFlags
	IntegrityBitmapMode bool `flag:"integrity-bitmap-mode" help:"integrity: write in bitmap mode (tags recomputed after a crash) instead of through the journal"`
	IntegrityNoJournal  bool `flag:"integrity-no-journal" help:"integrity: write data and tags in place, no crash protection"`
}

// integrityGroup lets a binding find the group in whatever options struct
// embeds it (openFlags).
func (g *integrityFlags) integrityGroup() *integrityFlags { return g }

// integrityKeyFlags are what open and format share: the keys, the
// journal's MAC and encryption, the tag size.
type integrityKeyFlags struct {
	IntegrityKeyFile        string `flag:"integrity-key-file" help:"integrity: the key of an hmac-* --integrity"`
	IntegrityKeySize        *int64 `flag:"integrity-key-size" help:"integrity: bytes of --integrity-key-file to use" def:"all of it"`
	JournalIntegrity        string `flag:"journal-integrity" help:"integrity: the journal's MAC (hmac-sha256, …)" def:"none"`
	JournalIntegrityKeyFile string `flag:"journal-integrity-key-file" help:"integrity: the key of --journal-integrity"`
	JournalIntegrityKeySize *int64 `flag:"journal-integrity-key-size" help:"integrity: bytes of --journal-integrity-key-file to use" def:"all of it"`
	JournalCrypt            string `flag:"journal-crypt" help:"integrity: the journal's encryption (ctr-aes, chacha20, cbc-aes)" def:"none"`
	JournalCryptKeyFile     string `flag:"journal-crypt-key-file" help:"integrity: the key of --journal-crypt"`
	JournalCryptKeySize     *int64 `flag:"journal-crypt-key-size" help:"integrity: bytes of --journal-crypt-key-file to use" def:"all of it"`
	TagSize                 *int64 `flag:"tag-size" help:"integrity: tag size in bytes (format; open checks it)" def:"the algorithm's digest size"`
}

// integrityFormatFlags are format --type integrity's options besides
// --integrity, --sector-size and -q, which the format verb has anyway:
// its options struct embeds this group.
type integrityFormatFlags struct {
	integrityKeyFlags
	JournalSize       *byteSize `flag:"journal-size" help:"integrity: journal size in bytes (K/M/G units)" def:"the device's size/128, at most 64 MiB"`
	InterleaveSectors *int64    `flag:"interleave-sectors" help:"integrity: data sectors between tag areas (a power of 2)" def:"32768"`
	NoWipe            bool      `flag:"no-wipe" help:"integrity: do not initialize the data and tags (sectors read as integrity errors until written)"`
}

// integrityKey reads the key file of one of the group's algorithms.
func integrityKey(env *Env, what, path string, size *int64, keep func(...[]byte)) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	if size != nil && (*size <= 0 || *size > 4096) {
		return nil, usageErr("--%s-key-size %d is not between 1 and 4096", what, *size)
	}
	k, _, err := keyFileFlags{KeyFile: path, KeyfileSize: size}.read(env, true, "")
	if err != nil {
		return nil, err
	}
	keep(k)
	return k, nil
}

// options turns the group into the library's options, reading the key
// files (keep records each buffer to be wiped).
func (g *integrityFlags) options(env *Env, sectorSize *int64, keep func(...[]byte)) (blkcrypt.IntegrityOptions, error) {
	o := blkcrypt.IntegrityOptions{Algorithm: g.Integrity, JournalIntegrity: g.JournalIntegrity, JournalCrypt: g.JournalCrypt}
	switch {
	case g.IntegrityBitmapMode && g.IntegrityNoJournal:
		return o, usageErr("--integrity-bitmap-mode and --integrity-no-journal exclude each other")
	case g.IntegrityBitmapMode:
		o.Mode = integrity.ModeBitmap
	case g.IntegrityNoJournal:
		o.Mode = integrity.ModeDirect
	}
	for _, sz := range []struct {
		flag string
		v    *int64
		dst  *int
	}{{"tag-size", g.TagSize, &o.TagSize}, {"sector-size", sectorSize, &o.SectorSize}} {
		// A given size is never 0, which means "not given" to the library.
		if sz.v != nil && (*sz.v <= 0 || *sz.v > 1<<20) {
			return o, usageErr("--%s %d is out of range", sz.flag, *sz.v)
		} else if sz.v != nil {
			*sz.dst = int(*sz.v)
		}
	}
	for _, k := range []struct {
		what, alg, file string
		size            *int64
		dst             *[]byte
	}{
		{"integrity", g.Integrity, g.IntegrityKeyFile, g.IntegrityKeySize, &o.Key},
		{"journal-integrity", g.JournalIntegrity, g.JournalIntegrityKeyFile, g.JournalIntegrityKeySize, &o.JournalIntegrityKey},
		{"journal-crypt", g.JournalCrypt, g.JournalCryptKeyFile, g.JournalCryptKeySize, &o.JournalCryptKey},
	} {
		key, err := integrityKey(env, k.what, k.file, k.size, keep)
		if err != nil {
			return o, err
		}
		*k.dst = key
	}
	return o, o.Check()
}

// integrityOptions binds the --type integrity flags: o.Integrity, with
// the key files read. A dump needs none of them (the superblock is all it
// prints). Until the verb's options embed integrityFlags, the volume opens
// with integritysetup's defaults (crc32c, journal).
func integrityOptions(r *bindRequest, o *blkcrypt.OpenOptions) error {
	if r.mode != bindOpen {
		return nil
	}
	var g integrityFlags
	if x, ok := any(r.f).(interface{ integrityGroup() *integrityFlags }); ok {
		g = *x.integrityGroup()
	}
	iopts, err := g.options(r.env, r.f.SectorSize, r.keep)
	if err != nil {
		return err
	}
	o.Integrity = iopts
	return nil
}

// formatIntegrity is integritysetup format DEVICE, for the format verb's
// --type integrity: alg is its --integrity, sectorSize its --sector-size,
// b its -q. After the confirmation the device becomes an empty
// dm-integrity volume, through blkcrypt.FormatIntegrity (offline, no
// device-mapper).
func formatIntegrity(ctx context.Context, env *Env, alg string, sectorSize *int64, opts *integrityFormatFlags, b batchFlag, args []string) error {
	dev, err := oneArg(args)
	if err != nil {
		return err
	}
	var wipe [][]byte
	defer func() {
		for _, k := range wipe {
			clear(k)
		}
	}()
	g := integrityFlags{Integrity: alg, integrityKeyFlags: opts.integrityKeyFlags}
	iopts, err := g.options(env, sectorSize, func(k ...[]byte) { wipe = append(wipe, k...) })
	if err != nil {
		return err
	}
	o := iopts.FormatOptions()
	o.NoWipe, o.Force = opts.NoWipe, true
	if j := opts.JournalSize; j != nil {
		if *j == 0 {
			return usageErr("--journal-size 0 is too small")
		}
		o.JournalSize = int64(*j)
	}
	if il := opts.InterleaveSectors; il != nil {
		if *il <= 0 {
			return usageErr("--interleave-sectors %d is not a power of 2 from 8 to 2^31", *il)
		}
		o.InterleaveSectors = uint64(*il)
	}
	if err := o.Check(); err != nil {
		return err
	}
	st, err := os.Stat(dev)
	if err != nil {
		return deviceErr(fmt.Errorf("device %s does not exist or access denied", dev))
	}
	if st.IsDir() {
		return deviceErr(fmt.Errorf("device %s is a directory", dev))
	}
	if err := b.confirm(env, overwriteWarning(dev), ExitUsage, abortedMsg); err != nil {
		return err
	}
	if err := blkcrypt.FormatIntegrity(ctx, dev, o); err != nil {
		if errors.Is(err, blkcrypt.ErrDeviceTooSmall) || errors.Is(err, blkcrypt.ErrUnsupported) || errors.Is(err, blkcrypt.ErrInvalidOptions) {
			return err
		}
		return fmt.Errorf("cannot format integrity for device %s: %w", dev, err)
	}
	return nil
}
