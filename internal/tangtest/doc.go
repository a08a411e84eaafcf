// Package tangtest runs Debian's tang server for tests: /usr/libexec/tangd
// under socat on a loopback port, with fresh keys from tangd-keygen, and
// binds LUKS2 images to it with the real clevis (clevis luks bind), so
// that what blkcrypt unlocks through a tang token was made by the tools a
// RHEL or Debian install uses. Missing tools follow internal/testenv: a
// failure under CI, a skip elsewhere.
//
// The package is Linux only, as Debian's tang package is.
package tangtest
