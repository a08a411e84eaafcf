package cli

import "golang.org/x/sys/unix"

// hardenProcess keeps key pages out of core dumps and swap where the OS
// lets us. Failures are not fatal: an unprivileged user may lack
// RLIMIT_MEMLOCK.
func hardenProcess() {
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	_ = unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
	_ = unix.Mlockall(unix.MCL_CURRENT | unix.MCL_FUTURE)
}
