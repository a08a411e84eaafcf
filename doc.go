// Package blkcrypt opens and creates Linux disk-encryption volumes (dm-crypt
// plain mode, LUKS1, LUKS2) in userspace, byte-compatible with cryptsetup
// and the kernel.
//
// A *Volume is the decrypted view of a volume: an io.ReaderAt and
// io.WriterAt over whole or partial sectors, with Size, Flush and Close.
// Keys live in the sector cipher under it and are wiped on Close.
//
// The packages below it are usable on their own: capi (named ciphers and
// templates with prioritised, self-tested drivers), sector (dm-crypt sector
// encryption with every IV generator, batched and parallel), plain, luks1,
// luks2 and nbd.
package blkcrypt
