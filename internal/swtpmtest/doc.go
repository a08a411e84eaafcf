// Package swtpmtest runs swtpm, the software TPM 2.0 that Debian packages,
// for tests: on loopback TCP for the host's tools (blkcrypt's swtpm: TCTI,
// tpm2-tools, systemd-cryptenroll), or on a control socket for qemu's
// emulator TPM backend, over a state directory that may be handed from
// one to the other so that a guest and the host use the same TPM (the
// same seeds, hence the same primary keys). Missing tools follow
// internal/testenv: a failure under CI, a skip elsewhere.
package swtpmtest
