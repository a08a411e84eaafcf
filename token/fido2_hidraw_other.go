//go:build !linux

package token

import (
	"fmt"
	"io"
)

// errFIDO2OS: security keys are reached through Linux's hidraw only.
var errFIDO2OS = fmt.Errorf("%w: FIDO2 security keys are not supported on this OS (Linux hidraw only)", ErrFIDO2Device)

func openFIDO2Device(path string) (io.ReadWriteCloser, error) { return nil, errFIDO2OS }

// FIDO2Devices lists the FIDO2 security keys present; on this OS none
// can be reached.
func FIDO2Devices() ([]string, error) { return nil, errFIDO2OS }
