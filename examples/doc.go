// Package examples is a separate module that uses blkcrypt only through its
// public API, as an outside program would: the Go toolchain refuses any
// import of blkcrypt's internal packages from here, so whatever these
// programs and tests need must be exported.
//
//   - decrypt: opens a volume of any supported format with a passphrase
//     read from standard input and prints its type, size and the SHA-256 of
//     the plaintext.
//   - serve: opens a volume and serves its plaintext over NBD on a Unix
//     socket until SIGINT or SIGTERM.
//   - luksadmin: every LUKS header operation of the blkcrypt command
//     (format, add-key, change-key, remove-key, kill-slot, uuid, label,
//     priority, tokens, header backup and restore, convert, erase,
//     repair, dump, volume key) through the LUKS handle, over an image file
//     or the same image held in memory; luksadmin_test.go has cryptsetup
//     judge each result.
//
// fixtures_test.go opens cryptsetup's own LUKS1, LUKS2, VeraCrypt,
// BitLocker and FileVault 2 test images through blkcrypt.Open with only a
// passphrase and checks the plaintext against the expectations stated in
// the fixtures' README and in bitlk-images/images.conf.
package examples
