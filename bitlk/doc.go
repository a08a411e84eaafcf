// Package bitlk opens BitLocker (and BitLocker To Go) volumes read-only or
// read-write in userspace, byte-compatible with cryptsetup's BITLK support
// (lib/bitlk in cryptsetup, dm-crypt's eboiv and elephant IV modes).
//
// # Contract
//
// Read parses a device's metadata: the boot sector ("-FVE-FS-", or
// "MSWIN4.1" plus the BitLocker GUID for To Go), then the first of the
// three FVE metadata copies whose CRC32 is right and that sits where it
// says it does — so a volume with one or two damaged copies still opens.
// Only BitLocker version 2 metadata (Windows 7 and later) is read; version
// 1 is refused with ErrUnsupported, and so is an unknown encryption method.
//
// Metadata.VolumeKey turns a secret into the volume key, trying it, like
// cryptsetup, against every VMK (key protector) it can apply to:
//
//   - a password: UTF-8, hashed as UTF-16LE (non-ASCII passwords work),
//     stretched with 0x100000 rounds of SHA-256;
//   - a recovery password: 48 digits in eight dash-separated groups, each a
//     multiple of 11 (one trailing newline is ignored);
//   - a startup key: the contents of the .BEK file made for the VMK;
//   - nil: a clear-key VMK (BitLocker suspended), no secret needed.
//
// The VMK decrypts (AES-CCM) the metadata validation datum, whose SHA-256
// must match the FVE metadata block — so metadata altered after Windows
// wrote it is refused with ErrCorrupt — and then the FVEK, the volume key.
// A secret that opens nothing gives ErrWrongPassphrase. TPM and smart-card
// protectors cannot be used (TPM needs the machine's TPM; smart-card keys
// live on the card).
//
// blkcrypt.Open (Type "bitlk", or detected) gives the decrypted volume as a
// *blkcrypt.Volume of the size of the device, exactly what cryptsetup's BITLK activation maps: the volume
// header (the file system's boot area, stored encrypted elsewhere) shows at
// offset 0, the three 64 KiB metadata areas and the header's stored place
// read as zeros, everything else is decrypted in place with its physical
// sector number as IV. Ciphers: aes-xts-plain64 (128/256), aes-cbc-eboiv
// (128/256) and aes-cbc-elephant (128/256, Windows Vista/7), with 512- or
// 4096-byte sectors (4096-byte sectors count IVs in 4096-byte units).
// Written through a read-write Volume, data lands where Windows expects
// it (header writes are re-encrypted for the header's stored position);
// writes into the metadata areas are dropped, as dm-zero drops them.
//
// Volumes Windows has not finished encrypting (or decrypting), and
// encrypt-on-write ("used disk space only") volumes, are refused by
// blkcrypt.Open with ErrUnsupported and a message saying why, as cryptsetup refuses
// them; Read, VolumeKey and Dump still work on them.
//
// Dump writes what cryptsetup's bitlkDump prints.
package bitlk
