// Package integrity reads, writes and creates dm-integrity volumes in
// userspace, byte-compatible with Linux's dm-integrity target and
// integritysetup: a device whose every block carries a tag (a checksum or
// MAC of a standalone volume, or the per-sector metadata of dm-crypt's
// authenticated modes) that the kernel stores beside the data.
//
// On disk (drivers/md/dm-integrity.c): a 4 KiB superblock ("integrt",
// versions 1 to 6; Superblock, ParseSuperblock), the journal sections,
// then repeated runs of a tag area and 2^Log2InterleaveSectors data
// sectors (Geometry). Blocks are 512 to 4096 bytes; any tag size up to
// MaxTagSize.
//
// The contract:
//   - Open(dev, Options) on a writable volume does what the kernel does on
//     activation: it replays a journal left by a crash (commit ids, the
//     ring's wrap-around, the journal MAC, an encrypted journal) and recomputes the tags of the
//     regions a crash left dirty in bitmap mode. A read-only Open writes
//     nothing and serves committed journal entries from the journal.
//   - Volume.ReadSectors(dst, tags, first) reads whole blocks. With a tag
//     algorithm (Options.Algorithm: crc32c, crc32, sha1, sha256, sha512,
//     hmac(sha1|sha256|sha512) with Key) every block is checked; a block
//     whose tag does not match returns a *SectorError that errors.Is
//     ErrIntegrity, naming the block, and none of its data. Blocks past
//     the superblock's recalculation point, or in dirty bitmap regions of
//     a read-only open, are not checked, as the kernel does not check
//     them. With tags non-nil the stored tags are returned too: the raw
//     per-sector metadata a dm-crypt AEAD layer verifies itself (open
//     with no Algorithm for that).
//   - Volume.WriteSectors(src, tags, first) writes whole blocks, computing
//     the tags (Algorithm set, tags nil) or storing the caller's. In
//     ModeJournal (the default) a call commits the blocks and tags to the
//     journal, syncs, writes them in place and syncs: after a power cut
//     at any point every block reads as before or as after, verifying.
//     ModeBitmap writes in place under a dirty bitmap (tags recomputed
//     after a crash); ModeDirect has no crash protection, as the kernel's
//     D mode.
//   - Volume.WriteLentSectors(src, tags, first, ready) is WriteSectors
//     for a caller (dm-crypt's AEAD layer) that lends its ciphertext
//     buffer and may still be filling it: ready(k) waits for blocks
//     [0, k), so the journal takes the first sections while later ones
//     are encrypted, and whole sections go to the journal straight from
//     the buffer (commit ids swapped in, then back out) without a copy.
//   - ReadAt/WriteAt give byte access (partial blocks read-modify-write).
//   - Format creates a volume offline as integritysetup format leaves it
//     (data zeroed, tags computed, empty journal, superblock written last;
//     it refuses a device with data at its start unless Force). Dump
//     prints integritysetup dump's text.
//
// An encrypted journal (integritysetup --journal-crypt; Options.
// JournalCrypt and JournalCryptKey) is read and written as the kernel
// keeps it: ctr(aes) and chacha20 xor the journal with one keystream and
// encrypt the commit ids; cbc(aes) encrypts each section under an IV
// derived from its number.
//
// Not implemented: other journal ciphers (xts(aes) and the like; refused
// with ErrUnsupported), bitmap mode with an encrypted journal, a separate metadata device,
// inline tags (version 6), and the kernel's background recalculation (a
// volume marked recalculating stays so; its blocks past the point read
// unchecked).
//
// Errors: ErrNotIntegrity (no superblock), ErrUnsupported, ErrIntegrity
// (inside *SectorError), ErrJournal (a journal that cannot be replayed),
// ErrReadOnly, ErrNotEmpty.
package integrity
