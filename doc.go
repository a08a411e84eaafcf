// Package blkcrypt opens and creates Linux disk-encryption volumes in
// userspace, byte-compatible with cryptsetup and the kernel: LUKS1, LUKS2,
// plain dm-crypt, TrueCrypt/VeraCrypt, BitLocker, FileVault 2 and
// loop-AES.
//
// One entry point opens every format:
//
//	v, err := blkcrypt.Open(ctx, "disk.img", blkcrypt.OpenOptions{Passphrase: pass})
//	if errors.Is(err, blkcrypt.ErrWrongPassphrase) { … }
//	defer v.Close()
//	fmt.Println(v.Type(), v.Size()) // "luks2", "bitlk", "tcrypt", …
//
// The zero OpenOptions is the safe default: detect the type, try every
// keyslot, open read-write. Open locks the device as cryptsetup does
// (exclusive for read-write, shared for read-only; ErrBusy when held) until
// Close. OpenDevice does the same over any io.ReaderAt the caller opened.
// Format, AddKey and RemoveKey create and change LUKS headers. Every call
// that derives keys or searches for a header takes a context and returns
// promptly, with the context's error in the chain, when it ends.
//
// A *Volume is the decrypted view of a volume: an io.ReaderAt and
// io.WriterAt over whole or partial sectors, with Size, Flush and Close.
// Keys live in the sector cipher under it and are wiped on Close.
//
// A LUKS2 volume can be reencrypted while it is in use:
// OpenOptions.Reencrypt starts (or resumes) a reencryption and
// Volume.Reencrypt runs it, one hotzone at a time, while reads and writes
// go on (cryptsetup's online reencryption). Open of a header with a
// reencryption in progress maps it as cryptsetup's open does.
//
// Errors: ErrWrongPassphrase, ErrNoHeader, ErrUnsupported, ErrCorrupt,
// ErrInvalidOptions, ErrBusy, ErrDeviceTooSmall, ErrReadOnly, ErrClosed,
// ErrOutOfRange and ErrNoReencryption; every format's own sentinel errors match the shared one of
// the same meaning under errors.Is.
//
// The packages below it are usable on their own: capi (named ciphers and
// templates with prioritised, self-tested drivers), sector (dm-crypt sector
// encryption with every IV generator, batched and parallel), the format
// packages (plain, luks1, luks2, tcrypt, bitlk, fvault2, loopaes: headers,
// metadata and keys) and nbd. None of them imports this package.
package blkcrypt
