package cli

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/keyinput"
	"github.com/blkcrypt/blkcrypt/tcrypt"
)

// TrueCrypt and VeraCrypt volumes (--type tcrypt), as cryptsetup's
// tcryptOpen and tcryptDump. Key files: --key-file FILE (cryptsetup gives
// it more than once; our parser keeps one) plus --tcrypt-keyfiles F1,F2,…;
// with key files the passphrase is still read from the terminal or stdin
// (possibly empty). --key-file - reads the passphrase from stdin as a key
// file. Volumes open read-only unless --tcrypt-read-write is given: writing
// to an outer volume can destroy a hidden one, which blkcrypt does not
// protect.

func init() {
	addFlags(
		flagDef{"veracrypt-pim", 0, kindInt, "tcrypt: VeraCrypt personal iterations multiplier"},
		flagDef{"veracrypt-query-pim", 0, kindBool, "tcrypt: ask for the VeraCrypt PIM"},
		flagDef{"veracrypt", 0, kindBool, "tcrypt: scan for VeraCrypt too (the default)"},
		flagDef{"disable-veracrypt", 0, kindBool, "tcrypt: TrueCrypt only"},
		flagDef{"tcrypt-hidden", 0, kindBool, "tcrypt: use the hidden volume header"},
		flagDef{"tcrypt-system", 0, kindBool, "tcrypt: system encryption header (sector 62)"},
		flagDef{"tcrypt-backup", 0, kindBool, "tcrypt: use the backup header"},
		flagDef{"tcrypt-keyfiles", 0, kindString, "tcrypt: comma-separated key files (besides --key-file)"},
		flagDef{"tcrypt-read-write", 0, kindBool, "tcrypt: allow writes (read-only by default)"},
	)
	typeOpeners["tcrypt"] = openTCRYPT
	typeDumpers["tcrypt"] = dumpTCRYPT
}

// addFlags appends flags another file has not defined already.
func addFlags(defs ...flagDef) {
	for _, d := range defs {
		if _, ok := lookupFlag(d.name, 0, ""); !ok {
			flagDefs = append(flagDefs, d)
		}
	}
}

// tcryptOptions turns the flags into search options, reading the secrets.
func tcryptOptions(env *Env, p *parsed) (*tcrypt.Options, error) {
	o := &tcrypt.Options{
		Hash:        p.str("hash"),
		Cipher:      p.str("cipher"),
		Hidden:      p.bool("tcrypt-hidden"),
		System:      p.bool("tcrypt-system"),
		Backup:      p.bool("tcrypt-backup"),
		NoVeraCrypt: p.bool("disable-veracrypt"),
	}
	if o.NoVeraCrypt && p.bool("veracrypt") {
		return nil, usageErr("--veracrypt and --disable-veracrypt cannot be combined")
	}
	if p.has("veracrypt-pim") {
		if o.NoVeraCrypt {
			return nil, usageErr("option --veracrypt-pim is supported only for VeraCrypt compatible devices")
		}
		if p.bool("veracrypt-query-pim") {
			return nil, usageErr("the options --veracrypt-pim and --veracrypt-query-pim are mutually exclusive")
		}
		n := p.int("veracrypt-pim", 0)
		if n < 0 || n > 1<<32-1 {
			return nil, usageErr("invalid PIM value: outside of range")
		}
		o.PIM = uint32(n)
	}
	if p.bool("veracrypt-query-pim") && o.NoVeraCrypt {
		return nil, usageErr("option --veracrypt-query-pim is supported only for VeraCrypt compatible devices")
	}

	var files []string
	kf := p.str("key-file")
	if kf != "" && kf != "-" {
		files = append(files, kf)
	}
	if l := p.str("tcrypt-keyfiles"); l != "" {
		for _, f := range strings.Split(l, ",") {
			if f != "" {
				files = append(files, f)
			}
		}
	}
	for _, f := range files {
		b, err := tcrypt.ReadKeyfile(f)
		if err != nil {
			wipeAll(o.Keyfiles)
			return nil, usageErr("%v", err)
		}
		o.Keyfiles = append(o.Keyfiles, b)
	}

	pass, pim, err := tcryptSecrets(env, p, kf == "-")
	if err != nil {
		wipeAll(o.Keyfiles)
		return nil, err
	}
	o.Passphrase = pass
	if pim != 0 {
		o.PIM = pim
	}
	return o, nil
}

func wipeAll(bs [][]byte) {
	for _, b := range bs {
		clear(b)
	}
}

// tcryptSecrets reads the passphrase (and the PIM with
// --veracrypt-query-pim): from the terminal, or from stdin one line each,
// or with --key-file - the whole of stdin as the passphrase.
func tcryptSecrets(env *Env, p *parsed, stdinKeyFile bool) ([]byte, uint32, error) {
	q := &parsed{set: map[string]string{}, args: p.args}
	for k, v := range p.set {
		if k != "key-file" {
			q.set[k] = v
		}
	}
	if stdinKeyFile {
		q.set["key-file"] = "-"
	}
	query := p.bool("veracrypt-query-pim")
	if !query || stdinKeyFile || (env.Prompt != nil && env.StdinIsTerminal) {
		pass, _, err := readSecret(env, q, "Enter passphrase: ")
		if err != nil {
			return nil, 0, err
		}
		if !query {
			return pass, 0, nil
		}
		var line []byte
		if env.Prompt != nil && env.StdinIsTerminal {
			line, err = env.Prompt("Enter VeraCrypt PIM: ")
		} else {
			line, err = keyinput.ReadPassphrase(env.Stdin, keyinput.Options{})
		}
		if err != nil {
			clear(pass)
			return nil, 0, usageErr("reading PIM: %v", err)
		}
		pim, err := parsePIM(line)
		clear(line)
		if err != nil {
			clear(pass)
			return nil, 0, err
		}
		return pass, pim, nil
	}
	// Both from a pipe: the passphrase line, then the PIM line.
	br := bufio.NewReader(env.Stdin)
	pass, err := keyinput.ReadPassphrase(br, keyinput.Options{Offset: p.int("keyfile-offset", 0), Size: p.int("keyfile-size", 0)})
	if err != nil {
		return nil, 0, usageErr("%v", err)
	}
	line, err := keyinput.ReadPassphrase(br, keyinput.Options{})
	if err != nil {
		clear(pass)
		return nil, 0, usageErr("reading PIM: %v", err)
	}
	pim, err := parsePIM(line)
	if err != nil {
		clear(pass)
		return nil, 0, err
	}
	return pass, pim, nil
}

func parsePIM(b []byte) (uint32, error) {
	s := string(bytes.TrimSpace(b))
	if s == "" {
		return 0, usageErr("invalid PIM value: parse error")
	}
	n, err := strconv.ParseUint(s, 10, 64)
	switch {
	case err != nil && errors.Is(err, strconv.ErrRange), err == nil && n > 1<<32-1:
		return 0, usageErr("invalid PIM value: outside of range")
	case err != nil:
		return 0, usageErr("invalid PIM value: parse error")
	case n == 0:
		return 0, usageErr("invalid PIM value: 0")
	}
	return uint32(n), nil
}

// tcryptErr maps search errors to cryptsetup's exit codes: no header
// found with these secrets is exit 2.
func tcryptErr(err error) error {
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		return err
	case errors.Is(err, tcrypt.ErrNoHeader):
		return &exitError{ExitPermission, err}
	case errors.Is(err, tcrypt.ErrCorruptHeader):
		return &exitError{ExitDevice, err}
	}
	return &exitError{ExitUsage, err}
}

// tcryptDevice is an open TCRYPT data device and where its header comes
// from.
type tcryptDevice struct {
	data       *os.File
	dataSize   int64
	hdr        *os.File // nil: the header is on data
	hdrSize    int64
	partOffset int64 // system volume: start of the partition, or -1
}

func (d *tcryptDevice) close() {
	if d.hdr != nil {
		d.hdr.Close()
	}
	if d.data != nil {
		d.data.Close()
	}
}

func fileSize(f *os.File) (int64, error) {
	n, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, deviceErr(fmt.Errorf("cannot get the size of %s: %w", f.Name(), err))
	}
	return n, nil
}

// openTCRYPTDevice opens DEVICE and the header device. For a system
// volume whose DEVICE (or --header) is a partition of a block device, the
// header is read from the whole drive and the IV offset is the partition
// start, as cryptsetup does through sysfs.
func openTCRYPTDevice(p *parsed, path string, readOnly bool) (*tcryptDevice, error) {
	d := &tcryptDevice{partOffset: -1}
	var err error
	if d.data, err = openDevice(path, readOnly); err != nil {
		return nil, err
	}
	if d.dataSize, err = fileSize(d.data); err != nil {
		d.close()
		return nil, err
	}
	hpath := p.str("header")
	if p.bool("tcrypt-system") {
		meta := path
		if hpath != "" {
			meta = hpath
		}
		if base, start, ok := partitionOf(meta); ok {
			d.partOffset = start
			hpath = base
		}
	}
	if hpath != "" {
		if d.hdr, err = openDevice(hpath, true); err != nil {
			d.close()
			return nil, err
		}
		if d.hdrSize, err = fileSize(d.hdr); err != nil {
			d.close()
			return nil, err
		}
		if p.bool("tcrypt-system") && d.partOffset < 0 {
			// A drive image as --header and a copy of one of its
			// partitions as DEVICE: find the partition by its size.
			if start, ok := partitionBySize(d.hdr, d.dataSize/512); ok {
				d.partOffset = start
			}
		}
	}
	return d, nil
}

// partitionBySize looks in the MBR or GPT partition table of a drive image
// for the one partition of the given size in 512-byte sectors, and returns
// its start.
func partitionBySize(f io.ReaderAt, sectors int64) (int64, bool) {
	var found []int64
	mbr := make([]byte, 512)
	if _, err := f.ReadAt(mbr, 0); err != nil || mbr[510] != 0x55 || mbr[511] != 0xaa {
		return 0, false
	}
	gpt := make([]byte, 512)
	if _, err := f.ReadAt(gpt, 512); err == nil && string(gpt[:8]) == "EFI PART" {
		le := binary.LittleEndian
		lba, n, size := int64(le.Uint64(gpt[72:])), int64(le.Uint32(gpt[80:])), int64(le.Uint32(gpt[84:]))
		if size < 128 || n > 1024 {
			return 0, false
		}
		e := make([]byte, size)
		for i := int64(0); i < n; i++ {
			if _, err := f.ReadAt(e, lba*512+i*size); err != nil {
				break
			}
			first, last := int64(le.Uint64(e[32:])), int64(le.Uint64(e[40:]))
			if !bytes.Equal(e[:16], make([]byte, 16)) && last-first+1 == sectors {
				found = append(found, first)
			}
		}
	} else {
		for i := 0; i < 4; i++ {
			e := mbr[446+16*i : 462+16*i]
			start, n := int64(binary.LittleEndian.Uint32(e[8:])), int64(binary.LittleEndian.Uint32(e[12:]))
			if e[4] != 0 && e[4] != 0xee && n == sectors {
				found = append(found, start)
			}
		}
	}
	if len(found) != 1 {
		return 0, false
	}
	return found[0], true
}

// partitionOf reports whether path is a partition of a block device, and
// then the whole device and the partition start in 512-byte sectors.
func partitionOf(path string) (base string, start int64, ok bool) {
	st, err := os.Stat(path)
	if err != nil || st.Mode()&os.ModeDevice == 0 {
		return "", 0, false
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", 0, false
	}
	sys := filepath.Join("/sys/class/block", filepath.Base(real))
	if _, err := os.Stat(filepath.Join(sys, "partition")); err != nil {
		return "", 0, false
	}
	b, err := os.ReadFile(filepath.Join(sys, "start"))
	if err != nil {
		return "", 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return "", 0, false
	}
	parent, err := filepath.EvalSymlinks(sys)
	if err != nil {
		return "", 0, false
	}
	return filepath.Join("/dev", filepath.Base(filepath.Dir(parent))), n, true
}

func (d *tcryptDevice) readHeader(o *tcrypt.Options) (*tcrypt.Header, tcrypt.Geometry, error) {
	g := tcrypt.Geometry{HeaderDeviceSize: d.dataSize, DataDeviceSize: d.dataSize, PartitionOffset: d.partOffset}
	var src io.ReaderAt = d.data
	if d.hdr != nil {
		src, g.HeaderDeviceSize, g.Separate = d.hdr, d.hdrSize, true
	}
	h, err := tcrypt.Read(src, g.HeaderDeviceSize, o)
	if err != nil {
		return nil, g, tcryptErr(err)
	}
	return h, g, nil
}

func openTCRYPT(env *Env, p *parsed, path string, readOnly bool) (*blkcrypt.Volume, error) {
	if !p.bool("tcrypt-read-write") {
		readOnly = true
	}
	o, err := tcryptOptions(env, p)
	if err != nil {
		return nil, err
	}
	defer clear(o.Passphrase)
	defer wipeAll(o.Keyfiles)
	d, err := openTCRYPTDevice(p, path, readOnly)
	if err != nil {
		return nil, err
	}
	h, g, err := d.readHeader(o)
	if err != nil {
		d.close()
		return nil, err
	}
	defer h.Wipe()
	if d.hdr != nil {
		d.hdr.Close()
		d.hdr = nil
	}
	m, err := h.Mapping(g)
	if err != nil {
		d.close()
		return nil, usageErr("%v", err)
	}
	defer m.Wipe()
	if m.Note != "" {
		fmt.Fprintf(env.Stderr, "blkcrypt: %s\n", m.Note)
	}
	v, err := tcrypt.NewVolume(d.data, m, readOnly)
	if err != nil {
		d.close()
		return nil, usageErr("%v", err)
	}
	return v, nil
}

func dumpTCRYPT(env *Env, p *parsed, path string) error {
	o, err := tcryptOptions(env, p)
	if err != nil {
		return err
	}
	defer clear(o.Passphrase)
	defer wipeAll(o.Keyfiles)
	d, err := openTCRYPTDevice(p, path, true)
	if err != nil {
		return err
	}
	defer d.close()
	h, g, err := d.readHeader(o)
	if err != nil {
		return err
	}
	defer h.Wipe()
	if p.bool("dump-volume-key") {
		h.DumpVolumeKey(env.Stdout, path, h.DataOffset(g.HeaderDeviceSize))
		return nil
	}
	meta := path
	if hp := p.str("header"); hp != "" {
		meta = hp
	}
	h.Dump(env.Stdout, meta)
	return nil
}
