// Package tcrypt opens TrueCrypt and VeraCrypt volumes as cryptsetup's
// TCRYPT support (lib/tcrypt) does: the same header search, the same
// dm-crypt mapping, byte-compatible data.
//
// # Header
//
// A volume header is one 512-byte sector: a 64-byte salt and 448 bytes
// encrypted with a key derived from the password (see ParseFields for the
// layout). Nothing says which derivation or cipher was used, so every
// combination is tried, in cryptsetup's order (KDFs, Chains):
//
//   - derivations: PBKDF2 with RIPEMD-160 (2000, 1000), SHA-512 (1000),
//     Whirlpool (1000), SHA-1 (2000, TrueCrypt 1.x); VeraCrypt's SHA-512,
//     Whirlpool, SHA-256, BLAKE2s-256 (500000) and RIPEMD-160 (655331), the
//     boot variants (SHA-256 and BLAKE2s-256 200000, RIPEMD-160 327661),
//     and Argon2id (time 6, 416 MiB, 1 lane). A PIM replaces the counts
//     (15000 + 1000·PIM; boot 2048·PIM; Argon2id time and memory from the
//     PIM) and leaves out the TrueCrypt derivations; PBKDF2-Streebog-512
//     (500000) comes last, as in cryptsetup;
//   - ciphers: AES, Serpent, Twofish, Camellia, Kuznyechik and their
//     VeraCrypt cascades in XTS; TrueCrypt 4.1-4.3's LRW; TrueCrypt
//     1.0-4.0's CBC ("cbc-tcw" for one cipher, an outer CBC over cascades,
//     little-endian Blowfish, CAST5, 3DES).
//
// The header decrypts when its magic is "TRUE" (or "VERA", unless VeraCrypt
// is disabled) and the CRC-32s of the keys and (from version 4) of the
// header match. The password is the passphrase, or, with key files, a 64-
// (VeraCrypt: up to 128-) byte pool into which each key file's first MiB
// is mixed through a CRC-32 register before the passphrase bytes are added
// (Secret).
//
// Search runs the derivations in parallel: PBKDF2 output blocks are
// independent, a shorter count is on the way to a longer one with the same
// hash (1000 → 2000 → 327661 → 655331), so work is cut into segments that
// end where some derivation is complete, scheduled in search order over
// Options.Workers goroutines; the first header found wins and stops the
// rest. Options.Workers = 1 is cryptsetup's one-after-another order. An
// Argon2id derivation cannot be interrupted: when another derivation wins
// first it finishes in the background and is discarded, and one dearer
// than VeraCrypt's default (a large PIM) starts only once every PBKDF2
// derivation has failed. A search that finds nothing (a wrong passphrase)
// takes 38 s on one core of the 2-core test machine, 22 s on both (go test
// -bench Search ./tcrypt); TrueCrypt alone (--disable-veracrypt) 50 ms.
//
// # Where the header and the data are
//
//	normal     header at 0, backup at end-128 KiB (Options.Backup)
//	hidden     header at 64 KiB, then (TrueCrypt < 6) at end-1536;
//	           hidden backup at end-64 KiB
//	system     header at 31744 (sector 62 of the drive)
//
// Header.DataOffset and Header.IVOffset follow cryptsetup's
// TCRYPT_get_data_offset and TCRYPT_get_iv_offset (XTS: IV offset = data
// offset; LRW: 0; CBC: the master-key offset; old hidden volumes are placed
// from the end of the device). Header.Mapping gives what TCRYPT_activate
// loads into dm-crypt: one crypt target per cipher, stacked, the one on the
// device using the last cipher of the chain, every target with the same IV
// offset; system volumes are mapped through the whole drive image (offsets
// from the header) or through a partition (IV offset = partition start).
// A single-cipher CBC volume maps to CIPHER-cbc-tcw; CAST5 and 3DES have
// 64-bit blocks, so their IV seed is 8 bytes (cast5-cbc-tcw,
// des3_ede-cbc-tcw). cryptsetup refuses to map the outer-CBC cascades and
// Blowfish (no such dm-crypt mode), and so does Mapping, with a
// LegacyModeError.
//
// # API
//
//	h, err := tcrypt.Read(dev, size, &tcrypt.Options{Passphrase: p, PIM: 0, Hidden: false})
//	h.Dump(os.Stdout, path)                     // as cryptsetup tcryptDump
//	h.DumpVolumeKey(os.Stdout, path, h.DataOffset(size))
//	m, err := h.Mapping(tcrypt.Geometry{HeaderDeviceSize: size, DataDeviceSize: size, PartitionOffset: -1})
//	c, err := m.Ciphers(); cas := &tcrypt.Cascade{Layers: c} // the same transform in one call
//	v, err := blkcrypt.Open(ctx, path, blkcrypt.OpenOptions{Type: "tcrypt", Passphrase: p})
//	// stacked volumes, one per cipher, as dm-crypt stacks them
//
// A failed search wraps ErrNoHeader, which matches blkcrypt.ErrWrongPassphrase
// and blkcrypt.ErrNoHeader (exit code 2 on the command line); a magic with a bad CRC is ErrCorruptHeader.
// Keys are wiped by Header.Wipe and Mapping.Wipe; the derived keys and the
// password pool are wiped as soon as they are used.
package tcrypt
