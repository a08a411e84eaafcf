// Package sector implements dm-crypt's sector semantics: cipher
// specifications, IV generators, sector numbering and geometry, and the
// engine that spreads large batches over the cores.
//
// # Spec
//
// ParseSpec reads both forms dm-crypt takes, the legacy
// "cipher[:keycount]-chainmode-ivmode[:ivopts]" ("aes-xts-plain64",
// "aes-cbc-essiv:sha256", "aes-cbc-elephant") and "capi:NAME-ivmode[:ivopts]"
// ("capi:xts(aes)-plain64"). A Spec names the capi transform, the number of
// subkeys and the IV generator; "essiv:H" becomes the essiv(…,H) template
// with a plain64 IV, as in Linux since 5.4. Errors wrap ErrInvalidSpec (does
// not parse or names nothing that exists) or ErrUnsupported (valid for
// dm-crypt, not provided here), and name the part that is wrong.
//
// # Cipher
//
// A Cipher is a keyed spec with its geometry (Options: sector size 512 to
// 4096, iv_offset, large IVs): one capi Tfm per subkey and the IV
// generator. EncryptSectors(dst, src, firstSector) encrypts whole sectors;
// firstSector counts 512-byte units from the start of the encrypted data,
// as dm-crypt does, and must be aligned to the sector size. The IV sector
// number is IVOffset + firstSector + i·(SectorSize/512), shifted right by
// log2(SectorSize/512) only with LargeIV; the subkey is chosen from the
// unshifted number. dst may be src itself; otherwise it must not overlap
// src. The output is dm-crypt's, byte for byte: the tests compare it with
// cryptsetup's vectors and images, OpenSSL, and the kernel (test/kernel).
//
// A request that is not whole sectors, a short or partly overlapping
// destination, or an unaligned first sector is refused with an error
// wrapping ErrInvalidRequest, and nothing is written. Construction errors
// wrap ErrInvalidSpec, ErrUnsupported, ErrInvalidKey or ErrInvalidOptions
// (or a capi error where the driver refuses). Key bytes never appear in an
// error.
//
// A Cipher is safe for concurrent use: requests share no state except
// pooled buffers. Wipe zeroes the key material; it must not race with
// requests, and the Cipher must not be used after it.
//
// # Engine
//
// An Engine decides how a batch runs. Below a break-even size it runs
// inline in the caller's goroutine; above it, the caller and one worker per
// extra core share it, the caller from the front and the workers from the
// back. The break-even is measured per driver and sector size on first use
// (a few milliseconds), or fixed with SetThreshold or the environment
// variable named by EnvThreshold. The result is the same either way; only
// the speed differs. An Engine is safe for concurrent use by many Ciphers;
// its workers live as long as the process. DefaultEngine is shared by every
// Cipher whose Options name no Engine.
//
// IV modes that read or change the data (lmk, tcw, elephant) run one sector
// at a time, as dm-crypt does; every other mode makes the IVs of up to 256
// sectors at once and hands them to the driver in one call.
//
// # AF_ALG
//
// On Linux, NewAFALGCipher offers the same request semantics with the
// transform run by the kernel through AF_ALG, falling back to the
// in-process Cipher below a measured break-even. It fails with ErrNoAFALG
// where the kernel offers no AF_ALG, and ErrUnsupported where it cannot
// offload the spec (the kernel lacks the transform or disagrees with the
// in-process drivers, or the IV mode needs the data or several subkeys).
package sector
