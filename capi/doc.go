// Package capi is blkcrypt's crypto API, modelled on the Linux kernel's: the
// names dm-crypt and cryptsetup use ("xts(aes)", "essiv(cbc(aes),sha256)",
// "sha256"), the drivers that implement them, templates that build modes
// over any block cipher, priorities that pick the fastest driver, and
// known-answer self-tests that keep a broken driver from being picked.
//
// # Names, drivers and templates
//
// A name parses (ParseName) into an identifier with optional arguments. An
// Alg is one driver of a name: its driver name ("xts-aes-vaes",
// "cbc(aes-generic)"), a priority (the Priority constants, kernel style:
// higher wins), a Type (cipher, skcipher, hash), key sizes and a
// constructor. Register adds drivers; RegisterTemplate adds templates,
// whose instances are built on demand over every self-tested driver of the
// arguments and take their priority from them. An Alg is immutable once
// registered, except for its cached self-test state.
//
// Drivers(name) lists every candidate of a name, best first, template
// instances included, whether or not they have passed their self-test.
// Lookup, LookupDriver, NewSkcipher, NewCipher, NewHash and HashFunc only
// return a driver that passed: each driver runs its known answers
// (internal/testmgr) once, on first use, and SelfTestState says how that
// went. Alg.Skcipher keys the driver it is called on without testing it;
// call SelfTest first on an Alg obtained from Drivers or List.
//
// # What a driver promises, and what it may assume
//
// A skcipher driver implements Skcipher, and optionally SectorSkcipher (many
// equal-size requests with one IV each, in one call), Plain64Skcipher (the IV
// as a 64-bit number by value) and Wiper. It may assume what Tfm checks:
// the IV has IVSize bytes, the length is one the driver takes (a multiple of
// BlockSize, or at least MinLen for XTS with ciphertext stealing), dst is
// at least as long as src, and dst and src are the same slice or do not
// overlap at all. It must not keep references to the buffers, must not
// change an IV passed to Encrypt or Decrypt (the ivs of the sector forms are
// scratch space), and must produce exactly the kernel's output: the fuzz
// targets compare every driver with the generic modes of modes.go.
//
// # Tfm
//
// A Tfm is a keyed skcipher, like the kernel's crypto_skcipher after setkey.
// It validates every request and returns an error wrapping ErrInvalidLength
// instead of passing bad input on, so a driver never sees it. The one
// exception is UncheckedPlain64, for the sector layer's single-sector path,
// whose caller makes those checks itself. A Tfm holds no per-request state
// and is safe for concurrent use by any number of goroutines; Wipe zeroes
// the key where the driver can, and must not race with requests (after it,
// the Tfm must not be used).
//
// # Concurrency
//
// Registration, lookup, template instantiation and self-tests are safe for
// concurrent use (the registry and each driver's self-test state are
// locked). Drivers are registered by this package's init functions;
// Register and Unregister at run time exist for tests that inject drivers.
//
// # Errors
//
// Every error this package returns wraps one of ErrNotFound, ErrInvalidName,
// ErrInvalidKeySize, ErrInvalidLength or ErrSelfTest, and carries the
// algorithm or driver name; test with errors.Is. Key bytes never appear in
// an error.
package capi
