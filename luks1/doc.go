// Package luks1 reads, unlocks and writes LUKS1 headers, byte-compatible
// with cryptsetup.
//
// The on-disk header (Phdr) is 592 big-endian bytes at offset 0: magic
// "LUKS\xba\xbe", version 1, cipher name and mode, hash spec, payload
// offset (sectors), key size, a PBKDF2 digest of the volume key (20 bytes,
// salt, iterations), the UUID and eight keyslots. Each keyslot holds PBKDF2
// iterations, a salt, and the sector of its key material: the volume key
// split into 4000 anti-forensic stripes and encrypted with the volume
// cipher in 512-byte sectors numbered from 0 at the start of the area.
//
// # API
//
//	dev := luks1.File{File: f}                   // or any luks1.Device
//	h, err := luks1.Read(dev)                     // parse + validate like cryptsetup
//	key, slot, err := h.Unlock(dev, pass, luks1.AnySlot)
//	h.DataOffset(); h.DataSize(devSize); h.Cipher(); h.KeySize(); h.SectorSize(); h.UUID()
//	h, err = luks1.Format(dev, key, pass, luks1.FormatOptions{})
//	slot, err = h.AddKey(dev, key, newPass, luks1.KeyslotOptions{}) // first free keyslot
//	slot, err = h.ChangeKey(dev, oldPass, newPass, luks1.AnySlot, luks1.KeyslotOptions{})
//	err = h.RemoveKey(dev, slot)
//	ok := h.VolumeKeyDigestOK(key)
//
// *Header implements luksutil.Header, the interface *luks2.Header shares.
// Keyslot options carry the KDF choice (PBKDFOptions): iteration time (the
// default 2 s is benchmarked the way cryptsetup does) or forced
// iterations (at least 1000).
//
// # Crash safety
//
// Every write goes through Device and is followed by Sync where ordering
// matters. AddKey writes the key material, then the header that enables
// it. RemoveKey writes the header that disables the keyslot, then wipes
// its material. ChangeKey adds the new keyslot, then removes the old one,
// so at every point the old or the new passphrase opens the volume; it
// needs a free keyslot and refuses to overwrite a keyslot in place. Format
// over an existing LUKS header puts its first keyslot in an area the old
// header does not use, then switches headers. The 592-byte header spans
// two sectors; when its second changes it is written and synced first, so
// the switch is the one-sector write of the first. RestoreHeader puts a
// header backup back in the same spirit. A power cut, which may lose,
// reorder or tear unsynced writes, leaves what docs/security.md ("Crash
// safety") states per operation. After any error, Read the header again:
// the in-memory Header only changes when a header write succeeded.
//
// # Errors and secrets
//
// Errors wrap the sentinels (ErrWrongPassphrase, ErrCorruptHeader,
// ErrUnsupported, ErrNoFreeSlot, ...), shared with package luks2. They
// never contain passphrases or keys. Derived keys and decrypted key
// material are wiped after use; the digest is compared in constant time.
// Unlock returns the volume key: the caller owns it and should clear it.
package luks1
