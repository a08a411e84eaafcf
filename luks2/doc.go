// Package luks2 reads, unlocks and writes LUKS2 headers, byte-compatible
// with cryptsetup.
//
// A LUKS2 header is two metadata copies followed by a binary keyslots
// area. Each copy is a 4096-byte binary header (magic "LUKS\xba\xbe" for
// the primary at offset 0, "SKUL\xba\xbe" for the secondary at offset
// hdr_size; version 2, hdr_size, seqid, label, checksum algorithm, salt,
// UUID, subsystem, hdr_offset and a checksum over the binary header with
// the checksum zeroed plus the JSON area) and a NUL-padded JSON area of
// hdr_size-4096 bytes (hdr_size is 16 KiB … 4 MiB). The JSON holds
// keyslots, tokens, segments, digests and config; numbers the format
// stores as strings (offsets, sizes, iv_tweak, json_size, keyslots_size)
// are strings.
//
// # API
//
//	dev := luks2.File{File: f}                    // or any luks2.Device
//	h, err := luks2.Read(dev)                      // both copies, validated
//	h, err = luks2.ReadContext(ctx, dev)           // the same, stopping when ctx ends
//	key, slot, err := h.Unlock(dev, pass, luks2.AnySlot)
//	h.DataOffset(); h.DataSize(devSize); h.Cipher(); h.SectorSize(); h.KeySize(); h.UUID()
//	h, err = luks2.Format(dev, key, pass, luks2.FormatOptions{})
//	slot, err = h.AddKey(dev, key, newPass, luks2.KeyslotOptions{}) // first free keyslot
//	slot, err = h.ChangeKey(dev, oldPass, newPass, luks2.AnySlot, opts)
//	err = h.RemoveKey(dev, slot)
//	ok := h.VolumeKeyDigestOK(key)
//	h.AddUnboundKey / UnlockUnbound, SetLabel, SetPriority, SetToken,
//	RemoveToken, Tokens, TokenIDs, Keyslots, Segments, Digests, Config, Repair
//
// *Header implements luksutil.Header, like *luks1.Header.
//
// # Reading
//
// Read follows cryptsetup: the primary is read at 0 and the secondary at
// the primary's hdr_size (or, when the primary is damaged, at each allowed
// size); each copy must pass the binary sanity checks, its checksum and
// the JSON validation (keyslot areas inside the keyslots area and not
// overlapping, segment and digest references, numbered ids, json_size,
// keyslots_size, string-typed numbers, ...). The valid copy with the
// higher seqid wins. NeedsRepair reports a damaged or stale copy; Repair
// (or any write) rewrites both. Tokens are kept byte for byte through
// rewrites; unknown sections and fields are preserved.
//
// The JSON is read by json-c's rules, the parser cryptsetup uses: a
// repeated member keeps its first place and takes its last value, values
// may nest 31 levels below the top-level object, members cryptsetup
// requires to be integers refuse fractions and exponents, and values it
// reads without a type check (digest iterations, keyslot priority) follow
// json_object_get_int, so "1000" is 1000. Ids are found by the name their
// number prints as: keyslot "01" has no digest, segment "00" leaves a gap.
// A primary binary header whose version is neither 1 nor 2 makes the
// device no LUKS device, whatever the secondary holds. Parsing and
// validation are linear or n log n in the size of the JSON area, and
// ReadContext returns with the context's error within 4096 values.
//
// Unknown mandatory requirements make the header read-only: reading and
// unlocking work, writes return ErrReadOnly. A reencryption in progress
// (several segments or a reencryption requirement) is refused with
// ErrUnsupported by Unlock and by writes; Reencrypt resumes it, and
// OpenOnline opens it with both keys for a caller that serves the volume.
//
// # Reencryption
//
// Reencrypt gives a volume a new key (and optionally a new cipher, key size
// or sector size) in place, offline, with cryptsetup 2.6's on-disk state
// (a "reencrypt" keyslot holding the resilience data, backup-previous and
// backup-final segments, an in-reencryption hotzone segment, the
// online-reencrypt-v2 requirement and the reencryption digest cryptsetup
// verifies), so either tool resumes the other's interrupted run; it
// recovers a crashed hotzone itself (cryptsetup does that in "repair").
// Resilience checksum, journal and none; mode reencrypt, direction forward.
// LockReencryption takes cryptsetup's reencryption lock.
//
// Online is the same reencryption driven one hotzone at a time by a
// caller that keeps serving the volume (the root package's
// Volume.Reencrypt, blkcrypt serve --reencrypt): OpenOnline loads or
// starts it and recovers a crashed hotzone, as cryptsetup's open does;
// the caller keeps requests out of the range Next names while Step
// reencrypts it, and routes every byte below Done to the new key.
//
// # Unlocking
//
// Keyslot priorities are honoured: with AnySlot "prefer" keyslots are tried
// first, then "normal" ones; "ignore" keyslots, and those whose stored
// priority is no known number (PriorityInvalid), only when named. Only
// keyslots bound to the data segment give the volume key (ErrUnbound
// otherwise); UnlockUnbound opens any keyslot.
//
// # Writing and crash safety
//
// Every write goes through Device. New keyslot material is written to free
// space and synced before the metadata that references it; metadata is
// written as primary (one write of binary header and JSON area), sync,
// secondary, sync, with seqid incremented; removed keyslot areas are wiped
// only after the metadata stops referring to them. ChangeKey writes the new
// passphrase to a fresh area and switches the keyslot over in one metadata
// update, keeping its number. Format picks a keyslot area that a LUKS
// header already on the device does not use and writes metadata with a
// higher seqid, so a crash leaves the old or the new volume openable;
// only an old header whose keyslot material lies under the new metadata
// (LUKS1's first keyslot at 4 KiB) cannot be kept, and its signatures are
// erased first. RestoreHeader writes a header backup back so that the
// current or the restored header works throughout. docs/security.md
// ("Crash safety") states what each operation guarantees after a power
// cut that loses, reorders or tears unsynced writes.
//
// Format defaults follow cryptsetup 2.7: aes-xts-plain64 with the given
// key (512 bits recommended), argon2id (benchmarked for 2 s, at most 1 GiB
// or half the RAM, up to 4 threads), 16 KiB metadata, data at 16 MiB with
// the keyslots area filling the space before it, and sector size 4096
// when the data area is aligned to it.
//
// # Errors and secrets
//
// Errors wrap the sentinels shared with luks1 (ErrWrongPassphrase,
// ErrCorruptHeader, ErrUnsupported, ErrNoFreeSlot, ErrReadOnly, ...) and
// never contain passphrases or keys. Derived keys and decrypted material
// are wiped after use and digests are compared in constant time.
package luks2
