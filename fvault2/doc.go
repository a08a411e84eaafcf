// Package fvault2 opens FileVault 2 volumes (Apple Core Storage, OS X 10.7
// to 10.12 and later Core Storage disks) in userspace, byte-compatible with
// cryptsetup's FVAULT2 support (lib/fvault2 in cryptsetup).
//
// # Contract
//
// Read parses a Core Storage physical volume: the 512-byte volume header
// ("CS" at offset 88, CRC32C-checked, version 1, a 128-bit metadata key),
// the disk label block and the volume groups descriptor it points to, then
// the encrypted metadata blocks (8 KiB each, AES-XTS with the metadata key
// and the physical volume UUID as tweak key, block index as tweak, each
// CRC32C-checked) until an all-zero block. Three block types are needed:
// 0x0019 (an XML plist with the PBKDF2 salt and iterations, the
// passphrase-wrapped key-encrypting key and the KEK-wrapped volume key),
// 0x001a (the logical volume's size and family UUID) and 0x0305 (its
// offset). Anything missing or failing a checksum is ErrCorrupt.
//
// Metadata.VolumeKey derives the 256-bit AES-XTS volume key from the
// passphrase (the bytes as given): PBKDF2-SHA256 → AES key unwrap (RFC
// 3394) of the KEK → unwrap of the 128-bit volume key; the tweak key is the
// first half of SHA-256(volume key || family UUID). A wrong passphrase
// fails the key-unwrap integrity check: ErrWrongPassphrase.
//
// blkcrypt.Open (Type "fvault2", or detected) gives the logical volume as a
// *blkcrypt.Volume: aes-xts-plain64,
// LogicalVolumeSize bytes at LogicalVolumeOffset, XTS tweaks the 512-byte
// sector numbers counted from the start of the logical volume.
//
// Dump writes what cryptsetup's fvault2Dump prints.
package fvault2
