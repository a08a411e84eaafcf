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
// The zero OpenOptions is the safe default: detect the type by its
// signature (LUKS, BitLocker, FileVault 2; plain, loop-AES and
// TrueCrypt/VeraCrypt have none and are named by Type, as with
// cryptsetup), try every keyslot, open LUKS, plain and loop-AES read-write
// and the formats blkcrypt does not own (BitLocker, FileVault 2,
// TrueCrypt) read-only unless ReadWrite asks. Open locks the device as
// cryptsetup does (exclusive for read-write, shared for read-only; ErrBusy
// when held) until Close. OpenDevice does the same over any io.ReaderAt
// the caller opened.
//
// LUKS headers are created by Format (a path or URI) and FormatDevice (any
// device) and changed through one handle, *LUKS, as libcryptsetup's
// crypt_device: OpenLUKS or OpenLUKSDevice, then AddKey, ChangeKey,
// RemoveKey, KillSlot, TestPassphrase or Header. Each method takes the
// device's lock, rereads the header, makes every check that can refuse
// before it writes, and leaves the old or the new header after a crash at
// any point. Calls that would make data unreachable (removing the last
// keyslot, formatting over an existing header) return ErrWouldDestroy
// unless their options say Force; empty passphrases are refused.
//
// Every call that derives keys or searches for a header takes a context
// and returns within 100 ms of its end, with the context's error in the
// chain and nothing written; a cancelled Argon2 stops and releases its
// memory.
//
// A path may be a URI of a registered scheme. Device packages register
// theirs when imported, as database/sql drivers do: import _
// "github.com/blkcrypt/blkcrypt/nbd/nbdclient" for nbd://, nbds:// and
// nbd+unix://, and (built with -tags ceph) _
// "github.com/blkcrypt/blkcrypt/rbd" for rbd:. This package imports
// neither, so a program that opens files compiles no network code.
//
// Nil and zero values are safe: Close of a nil or zero *Volume or *LUKS
// does not panic, and requests on them return ErrClosed.
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
// ErrInvalidOptions (with ErrWouldDestroy and ErrSlotInactive under it),
// ErrBusy, ErrDeviceTooSmall, ErrReadOnly, ErrClosed, ErrOutOfRange and
// ErrNoReencryption; every format's own sentinel errors match the shared
// one of the same meaning under errors.Is.
//
// The packages below it are usable on their own: capi (named ciphers and
// templates with prioritised, self-tested drivers), sector (dm-crypt sector
// encryption with every IV generator, batched and parallel), the format
// packages (plain, luks1, luks2, tcrypt, bitlk, fvault2, loopaes: headers,
// metadata and keys) and nbd. None of them imports this package but the
// device packages that register a URI scheme (nbd/nbdclient, rbd).
package blkcrypt
