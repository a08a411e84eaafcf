package cli

import (
	"errors"
	"fmt"
	"io"
)

// confirm asks before a destructive step as cryptsetup's yesDialog asks:
// only when stdin is a terminal and -q/--batch-mode is not given; the
// warning goes to stdout and the answer must be exactly "YES". With stdin
// not a terminal cryptsetup asks nothing and goes on, and so do we: a
// script says what it wants by running the command. A refusal returns an
// error with cryptsetup's exit code for that verb (code) and message
// (aborted); nothing has been written when it is asked.
func (b batchFlag) confirm(env *Env, warning string, code int, aborted string) error {
	if !env.StdinIsTerminal || b.Batch {
		return nil
	}
	fmt.Fprintf(env.Stdout, "\nWARNING!\n========\n%s\n\nAre you sure? (Type 'yes' in capital letters): ", warning)
	answer, err := readAnswer(env.Stdin)
	if err != nil {
		return &exitError{code, fmt.Errorf("error reading response from terminal: %w", err)}
	}
	if answer != "YES" {
		return &exitError{code, errors.New(aborted)}
	}
	return nil
}

// readAnswer reads one line a byte at a time, so that nothing after the
// newline (a passphrase typed ahead) is taken from the terminal's input.
func readAnswer(r io.Reader) (string, error) {
	var line []byte
	var b [1]byte
	for len(line) < 4096 {
		n, err := r.Read(b[:])
		if n == 1 {
			if b[0] == '\n' {
				return string(line), nil
			}
			line = append(line, b[0])
			continue
		}
		if err == io.EOF {
			return "", io.ErrUnexpectedEOF
		}
		if err != nil {
			return "", err
		}
	}
	return "", errors.New("answer too long")
}

// The warnings and refusals of the destructive verbs, as cryptsetup 2.6.1
// words them (its exit codes: format and header restore 1, removing the
// last keyslot or erasing 2).
const (
	abortedMsg         = "operation aborted"
	abortedKeyslotMsg  = "operation aborted, the keyslot was not wiped"
	abortedKeyslotsMsg = "operation aborted, keyslots were not wiped"
	lastKeyslotWarning = "This is the last keyslot. Device will become unusable after purging this key."
)

func overwriteWarning(dev string) string {
	return fmt.Sprintf("This will overwrite data on %s irrevocably.", dev)
}

// eraseWarning is luksErase's; the erase verb asks it with
// o.confirm(env, eraseWarning(dev), ExitPermission, abortedKeyslotsMsg).
func eraseWarning(dev string) string {
	return fmt.Sprintf("This operation will erase all keyslots on device %s.\nDevice will become unusable after this operation.", dev)
}

func restoreWarning(dev string, version int, sameUUID bool) string {
	kind := "LUKS"
	if version == 2 {
		kind = "LUKS2"
	}
	s := fmt.Sprintf("Device %s already contains %s header. Replacing header will destroy existing keyslots.", dev, kind)
	if !sameUUID {
		s += "\nWARNING: real device header has different UUID than backup!"
	}
	return s
}
