package mount

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// UnmountHint is the command that unmounts dir from outside.
func UnmountHint(dir string) string { return "fusermount3 -u " + dir }

func fusermountBin() string {
	if _, err := exec.LookPath("fusermount3"); err != nil {
		if _, err := exec.LookPath("fusermount"); err == nil {
			return "fusermount"
		}
	}
	return "fusermount3"
}

// mountFS runs fusermount3 itself and gives go-fuse the /dev/fuse
// descriptor it returns (go-fuse's "/dev/fd/N" mount point). go-fuse would
// run fusermount3 with the process's stderr, so a failure would print
// fusermount3's line beside the caller's; here its message becomes the
// error.
func mountFS(dir string, root fs.InodeEmbedder, opts *fs.Options) (*fuse.Server, func() error, error) {
	fd, err := fusermount(dir, &opts.MountOptions)
	if err != nil {
		return nil, nil, err
	}
	srv, err := fs.Mount(fmt.Sprintf("/dev/fd/%d", fd), root, opts)
	if err != nil {
		fusermountUnmount(dir, false)
		unix.Close(fd)
		return nil, nil, err
	}
	return srv, func() error { return fusermountUnmount(dir, false) }, nil
}

// fusermount mounts dir and returns the FUSE session's descriptor, which
// fusermount3 passes back over the socket named by _FUSE_COMMFD.
func fusermount(dir string, o *fuse.MountOptions) (int, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("socketpair: %w", err)
	}
	local, remote := os.NewFile(uintptr(pair[0]), "fusermount-local"), os.NewFile(uintptr(pair[1]), "fusermount-remote")
	defer local.Close()
	bin := fusermountBin()
	cmd := exec.Command(bin, "-o", mountOptionString(o), "--", dir)
	cmd.Env = []string{"_FUSE_COMMFD=3"}
	cmd.ExtraFiles = []*os.File{remote}
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &errb, &errb
	err = cmd.Run()
	remote.Close()
	if err != nil {
		return -1, fusermountErr(bin, err, errb.Bytes())
	}
	buf := make([]byte, 4)
	oob := make([]byte, unix.CmsgSpace(4*4))
	_, oobn, _, _, err := unix.Recvmsg(pair[0], buf, oob, 0)
	if err != nil {
		return -1, fmt.Errorf("receiving the FUSE descriptor from %s: %w", bin, err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return -1, fmt.Errorf("%s passed no FUSE descriptor", bin)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return -1, fmt.Errorf("%s passed no FUSE descriptor", bin)
	}
	return fds[0], nil
}

// mountOptionString is what go-fuse would pass fusermount3, with ',' and
// '\' escaped as fusermount3 expects.
func mountOptionString(o *fuse.MountOptions) string {
	opts := append([]string(nil), o.Options...)
	if o.AllowOther {
		opts = append(opts, "allow_other")
	}
	if o.FsName != "" {
		opts = append(opts, "fsname="+o.FsName)
	}
	if o.Name != "" {
		opts = append(opts, "subtype="+o.Name)
	}
	opts = append(opts, fmt.Sprintf("max_read=%d", o.MaxWrite))
	for i, s := range opts {
		opts[i] = strings.NewReplacer(`\`, `\\`, `,`, `\,`).Replace(s)
	}
	return strings.Join(opts, ",")
}

// fusermountUnmount unmounts dir, lazily if asked: then it leaves the name
// space at once and the kernel ends the session when the last open file
// is closed.
func fusermountUnmount(dir string, lazy bool) error {
	bin := fusermountBin()
	args := []string{"-u"}
	if lazy {
		args = append(args, "-z")
	}
	out, err := exec.Command(bin, append(args, "--", dir)...).CombinedOutput()
	if err != nil {
		return fusermountErr(bin, err, out)
	}
	return nil
}

// detachMount is the lazy unmount of a busy mount.
func detachMount(dir string) error { return fusermountUnmount(dir, true) }

func fusermountErr(bin string, err error, out []byte) error {
	msg := strings.Join(strings.Fields(string(out)), " ")
	msg = strings.TrimPrefix(msg, "/usr/bin/")
	if msg == "" {
		return fmt.Errorf("%s: %w", bin, err)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		// fusermount3's message already says what failed.
		return errors.New(msg)
	}
	return fmt.Errorf("%s: %w", msg, err)
}
