package nbd

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode"
)

// VolumeExportOptions are the options of an export line that serves an
// encrypted volume, named as the blkcrypt command's flags of serve DEVICE
// (its gateway takes exactly these): how the volume is unlocked, what it
// is (type, geometry of a plain volume), which layer of the device is
// served (partition, lv) and how (read-only, allow-discards). A program
// running its own gateway parses its list with VolumeExportSyntax, turns
// each spec into these with VolumeExportOptionsOf, and opens the device
// with them in its OpenExportFunc.
//
// Secrets come only from files: a gateway has no terminal for prompts,
// and one stdin. Without KeyFile, VolumeKeyFile or CinderKeyFile an export
// is unlocked by its LUKS2 tokens alone (tang, TPM2; TokenOnly is then
// set), so that no key is on the gateway's disk.
type VolumeExportOptions struct {
	// KeyFile is a passphrase file (key-file=), read from KeyfileOffset
	// (keyfile-offset=), KeyfileSize bytes of it when set
	// (keyfile-size=), as cryptsetup's --key-file.
	KeyFile       string
	KeyfileOffset int64
	KeyfileSize   *int64
	// VolumeKeyFile holds the volume key itself (volume-key-file=).
	VolumeKeyFile string
	// CinderKeyFile holds a raw key whose lowercase hex is the passphrase
	// (cinder-key-file=; OpenStack os-brick's LUKS encryptor convention:
	// see CinderPassphrase). It is the whole key, alone.
	CinderKeyFile string
	// KeySlot restricts the unlock to one keyslot (key-slot=).
	KeySlot *int64
	// TokenOnly unlocks by tokens only (token-only; implied without a key
	// file). TokenID (token-id=, 0..31) and TokenType (token-type=) choose
	// the token; TPM2Device (tpm2-device=, a TCTI such as
	// swtpm:host=H,port=P) and TPM2PINFile (tpm2-pin-file=) are those of a
	// systemd-tpm2 token; FIDO2Device (fido2-device=, a /dev/hidrawN path
	// or auto) and FIDO2PINFile (fido2-pin-file=) those of a systemd-fido2
	// token.
	TokenOnly    bool
	TokenID      *int64
	TokenType    string
	TPM2Device   string
	TPM2PINFile  string
	FIDO2Device  string
	FIDO2PINFile string
	// Type is the volume type (type=; "" detects it, and an undetected
	// volume is a LUKS one for the token rules); Header a detached header
	// (header=).
	Type, Header string
	// Cipher, KeySize, Hash, SectorSize, Offset, Skip, Size and
	// IVLargeSectors are the geometry of a plain volume (cipher=,
	// key-size= in bits, hash=, sector-size=, offset=, skip=, size= in
	// 512-byte sectors, iv-large-sectors), as cryptsetup's flags.
	Cipher         string
	KeySize        *int64
	Hash           string
	SectorSize     *int64
	Offset, Skip   *int64
	Size           *int64
	IVLargeSectors bool
	// Partition selects a partition of the device (partition=: a number,
	// PARTUUID=…, PARTLABEL=…); nil serves the whole device. LV names an
	// LVM2 logical volume "VG/LV" on the volume (lv=).
	Partition *string
	LV        string
	// ReadOnly (read-only) serves the export read-only; AllowDiscards
	// (allow-discards) passes NBD trims down to the device.
	ReadOnly, AllowDiscards bool
}

// volumeExportOption is one option a volume export line may carry: its
// kind and the field it sets (the value already checked by ParseExport).
type volumeExportOption struct {
	kind OptionKind
	set  func(o *VolumeExportOptions, v string)
}

func strVolOpt(field func(*VolumeExportOptions) *string) volumeExportOption {
	return volumeExportOption{OptionString, func(o *VolumeExportOptions, v string) { *field(o) = v }}
}

func intVolOpt(field func(*VolumeExportOptions) **int64) volumeExportOption {
	return volumeExportOption{OptionInt, func(o *VolumeExportOptions, v string) {
		n, _ := strconv.ParseInt(v, 0, 64) // ParseExport checked it
		*field(o) = &n
	}}
}

func flagVolOpt(field func(*VolumeExportOptions) *bool) volumeExportOption {
	return volumeExportOption{OptionFlag, func(o *VolumeExportOptions, _ string) { *field(o) = true }}
}

// volumeExportOptions is every option a volume export line may carry.
var volumeExportOptions = map[string]volumeExportOption{
	"key-file": strVolOpt(func(o *VolumeExportOptions) *string { return &o.KeyFile }),
	"keyfile-offset": {OptionInt, func(o *VolumeExportOptions, v string) {
		o.KeyfileOffset, _ = strconv.ParseInt(v, 0, 64)
	}},
	"keyfile-size":     intVolOpt(func(o *VolumeExportOptions) **int64 { return &o.KeyfileSize }),
	"volume-key-file":  strVolOpt(func(o *VolumeExportOptions) *string { return &o.VolumeKeyFile }),
	"key-slot":         intVolOpt(func(o *VolumeExportOptions) **int64 { return &o.KeySlot }),
	"type":             strVolOpt(func(o *VolumeExportOptions) *string { return &o.Type }),
	"header":           strVolOpt(func(o *VolumeExportOptions) *string { return &o.Header }),
	"token-only":       flagVolOpt(func(o *VolumeExportOptions) *bool { return &o.TokenOnly }),
	"token-id":         intVolOpt(func(o *VolumeExportOptions) **int64 { return &o.TokenID }),
	"token-type":       strVolOpt(func(o *VolumeExportOptions) *string { return &o.TokenType }),
	"tpm2-device":      strVolOpt(func(o *VolumeExportOptions) *string { return &o.TPM2Device }),
	"tpm2-pin-file":    strVolOpt(func(o *VolumeExportOptions) *string { return &o.TPM2PINFile }),
	"fido2-device":     strVolOpt(func(o *VolumeExportOptions) *string { return &o.FIDO2Device }),
	"fido2-pin-file":   strVolOpt(func(o *VolumeExportOptions) *string { return &o.FIDO2PINFile }),
	"cipher":           strVolOpt(func(o *VolumeExportOptions) *string { return &o.Cipher }),
	"key-size":         intVolOpt(func(o *VolumeExportOptions) **int64 { return &o.KeySize }),
	"hash":             strVolOpt(func(o *VolumeExportOptions) *string { return &o.Hash }),
	"sector-size":      intVolOpt(func(o *VolumeExportOptions) **int64 { return &o.SectorSize }),
	"offset":           intVolOpt(func(o *VolumeExportOptions) **int64 { return &o.Offset }),
	"skip":             intVolOpt(func(o *VolumeExportOptions) **int64 { return &o.Skip }),
	"size":             intVolOpt(func(o *VolumeExportOptions) **int64 { return &o.Size }),
	"iv-large-sectors": flagVolOpt(func(o *VolumeExportOptions) *bool { return &o.IVLargeSectors }),
	"partition": {OptionString, func(o *VolumeExportOptions, v string) {
		o.Partition = &v
	}},
	"lv":              strVolOpt(func(o *VolumeExportOptions) *string { return &o.LV }),
	"cinder-key-file": strVolOpt(func(o *VolumeExportOptions) *string { return &o.CinderKeyFile }),
	"read-only":       flagVolOpt(func(o *VolumeExportOptions) *bool { return &o.ReadOnly }),
	"allow-discards":  flagVolOpt(func(o *VolumeExportOptions) *bool { return &o.AllowDiscards }),
}

// VolumeExportSyntax is what a volume export line may carry: the options
// of VolumeExportOptions, checked together by VolumeExportOptionsOf, so
// that ParseExport and ReadExportsFile refuse a line whose options do not
// go together.
var VolumeExportSyntax = ExportSyntax{
	Options: func() map[string]OptionKind {
		m := make(map[string]OptionKind, len(volumeExportOptions))
		for k, o := range volumeExportOptions {
			m[k] = o.kind
		}
		return m
	}(),
	Check: func(e ExportSpec) error {
		_, err := VolumeExportOptionsOf(e)
		return err
	},
}

// VolumeExportOptionsOf is the typed form of a volume export's options
// (e parsed with VolumeExportSyntax), with the key rules applied: keys
// come from files, never stdin ("-"); cinder-key-file is the whole key,
// alone; token-only excludes a key; an export with no key is unlocked by
// its tokens only (TokenOnly set: nobody can type a passphrase for it),
// so its type must be a LUKS one (or detected); token-id is 0..31. The
// errors name the export, on one line.
func VolumeExportOptionsOf(e ExportSpec) (VolumeExportOptions, error) {
	var o VolumeExportOptions
	for k, v := range e.Options {
		opt, ok := volumeExportOptions[k]
		if !ok {
			return o, fmt.Errorf("export %s: unknown option %q", e.Name, k)
		}
		opt.set(&o, v)
	}
	if o.KeyFile == "-" || o.VolumeKeyFile == "-" || o.TPM2PINFile == "-" || o.FIDO2PINFile == "-" || o.CinderKeyFile == "-" {
		return o, fmt.Errorf("export %s: a key cannot come from stdin; name a file", e.Name)
	}
	keyGiven := o.KeyFile != "" || o.VolumeKeyFile != "" || o.CinderKeyFile != ""
	switch {
	case o.CinderKeyFile != "" && (o.KeyFile != "" || o.VolumeKeyFile != "" || o.KeyfileOffset != 0 || o.KeyfileSize != nil):
		return o, fmt.Errorf("export %s: cinder-key-file is the whole key; it cannot be used with key-file, volume-key-file, keyfile-offset or keyfile-size", e.Name)
	case keyGiven && o.TokenOnly:
		return o, fmt.Errorf("export %s: token-only cannot be used with key-file, volume-key-file or cinder-key-file", e.Name)
	case keyGiven:
	case o.Type != "" && !strings.HasPrefix(o.Type, "luks"):
		return o, fmt.Errorf("export %s: a type=%s volume has no tokens: needs key-file=FILE or volume-key-file=FILE", e.Name, shownValue(o.Type))
	default:
		o.TokenOnly = true
	}
	if o.TokenID != nil && (*o.TokenID < 0 || *o.TokenID > 31) {
		return o, fmt.Errorf("export %s: token-id=%d is not in 0..31", e.Name, *o.TokenID)
	}
	return o, nil
}

// shownValue is an option's value as an error shows it: as typed when it
// is plain text, quoted when it holds a space or control character, so
// that an error stays on one line and says where the value ends.
func shownValue(v string) string {
	for _, r := range v {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return strconv.Quote(v)
		}
	}
	return v
}

// MaxCinderKey bounds a cinder-key-file: Barbican's symmetric keys are 16
// to 64 bytes, and a mistaken path must not be read whole.
const MaxCinderKey = 4096

// CinderPassphrase is the LUKS passphrase of a volume OpenStack's os-brick
// formatted with the raw key in the file at path: the key's lowercase hex
// (binascii.hexlify), all of it. An empty file, or one larger than
// MaxCinderKey, is refused. The caller wipes the result.
func CinderPassphrase(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot open cinder-key-file: %w", err)
	}
	defer f.Close()
	// One buffer, wiped after: no copies left by a growing read.
	buf := make([]byte, MaxCinderKey+1)
	defer clear(buf)
	n, err := io.ReadFull(f, buf)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = nil
	}
	raw := buf[:n]
	switch {
	case err != nil:
		return nil, fmt.Errorf("reading cinder-key-file %s: %w", path, err)
	case len(raw) == 0:
		return nil, fmt.Errorf("cinder-key-file %s is empty", path)
	case len(raw) > MaxCinderKey:
		return nil, fmt.Errorf("cinder-key-file %s is larger than %d bytes: not a key", path, MaxCinderKey)
	}
	pass := make([]byte, hex.EncodedLen(len(raw)))
	hex.Encode(pass, raw)
	return pass, nil
}

// VolumeExport is the Export of a volume opened with o: the gateway-wide
// read-only and allow-discards apply to every export, readOnly says
// whether the volume was opened read-only (a format may refuse writes
// though o.ReadOnly was not set: BitLocker, TCRYPT), and every connection
// may flush (MultiConn: Flush syncs the device for every connection).
func (o VolumeExportOptions) VolumeExport(description string, b Backend, readOnly, gatewayDiscards bool) Export {
	return Export{
		Description:   description,
		Backend:       b,
		ReadOnly:      readOnly,
		AllowDiscards: o.AllowDiscards || gatewayDiscards,
		MultiConn:     true,
	}
}
