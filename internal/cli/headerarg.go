package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// noDeviceVerbs take no DEVICE, so --header means nothing to them (as to
// cryptsetup's benchmark).
var noDeviceVerbs = map[string]bool{"demo": true, "speed": true, "crypto": true, "benchmark": true}

// checkHeader names --header, not DEVICE, when the header file is what is
// wrong: a directory (cryptsetup: "Device DIR is not compatible", exit 4)
// or missing (exit 4; format creates a missing header file). Without it
// the verbs that detect the type from the header reported DEVICE as "not a
// valid LUKS device". reencrypt --encrypt creates it too, and --decrypt exports the header to it.
func checkHeader(verb string, p *commandLine) error {
	h := p.set["header"]
	if h == "" || noDeviceVerbs[verb] {
		return nil
	}
	st, err := os.Stat(h)
	switch {
	case errors.Is(err, fs.ErrNotExist) && (verb == "format" || verb == "reencrypt" && (p.set["encrypt"] == "true" || p.set["decrypt"] == "true")):
		return nil
	case err != nil:
		return deviceErr(fmt.Errorf("header %s does not exist or access denied", h))
	case st.IsDir():
		return deviceErr(fmt.Errorf("header %s is a directory", h))
	}
	return nil
}
