package probe

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"text/tabwriter"

	"github.com/blkcrypt/blkcrypt/lvm"
	"github.com/blkcrypt/blkcrypt/partition"
)

// Node is one device of the tree Tree returns, shaped as one entry of
// `lsblk -J -f`'s "blockdevices": field names are lsblk's where lsblk has
// one, and a field it lacks is left out. Kind is "disk", "part", "crypt"
// or "lvm"; Size and Start are bytes (Start from the start of the parent
// device); Note says why Tree did not descend (locked, an error).
type Node struct {
	Name      string  `json:"name"`
	Kind      string  `json:"kind"`
	Size      int64   `json:"size"`
	Start     *int64  `json:"start,omitempty"`
	PTType    string  `json:"pttype,omitempty"` // "gpt" or "dos", on a disk with a table
	PTUUID    string  `json:"ptuuid,omitempty"`
	PartN     int     `json:"partn,omitempty"`
	PartType  string  `json:"parttype,omitempty"` // a GPT type GUID, or "0x83"
	PartTName string  `json:"parttypename,omitempty"`
	PartLabel string  `json:"partlabel,omitempty"`
	PartUUID  string  `json:"partuuid,omitempty"`
	FSType    string  `json:"fstype,omitempty"` // Info.Type, or "fvault2"
	FSVer     string  `json:"fsver,omitempty"`
	Label     string  `json:"label,omitempty"`
	UUID      string  `json:"uuid,omitempty"`
	Note      string  `json:"note,omitempty"`
	Children  []*Node `json:"children,omitempty"`
	// Warnings are the partition table's (a damaged primary GPT read
	// from its backup): one line each.
	Warnings []string `json:"-"`
}

// Volume is an unlocked encrypted volume, as TreeOptions.Unlock returns
// it: *blkcrypt.Volume has this method set.
type Volume interface {
	io.ReaderAt
	Size() int64
	Close() error
}

// TreeOptions tune Tree.
type TreeOptions struct {
	// Unlock opens the encrypted volume (FSType crypto_LUKS, BitLocker
	// or fvault2) of size bytes on dev, read-only, for Tree to look
	// inside; nil leaves every volume locked. Its error becomes the
	// node's Note (an ended context stops the tree). It must return a nil
	// interface with its error, not a nil *blkcrypt.Volume.
	Unlock func(ctx context.Context, dev io.ReaderAt, size int64, info Info) (Volume, error)
	// MaxDepth bounds the nesting of volumes and LVM (LUKS in LVM in
	// LUKS…); 0 is 5.
	MaxDepth int
}

// Tree describes the size-byte device dev, named name, as `lsblk -f`
// would: its partitions (GPT or MBR), what each holds (Identify), and,
// inside an LVM2 physical volume, the logical volumes, and inside an
// encrypted volume that Unlock opens, what it holds. Nothing is written.
// An error below the top becomes a Note; Tree fails only when the
// partition table is corrupt, dev cannot be read, or ctx ends.
func Tree(ctx context.Context, dev io.ReaderAt, size int64, name string, o TreeOptions) (*Node, error) {
	if o.MaxDepth <= 0 {
		o.MaxDepth = 5
	}
	root := &Node{Name: name, Kind: "disk", Size: size}
	t, err := partition.Read(dev, size, partition.Options{})
	switch {
	case err == nil:
	case errors.Is(err, partition.ErrNoTable):
		return root, fill(ctx, &o, root, dev, size, 0)
	default:
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	root.Warnings = t.Warnings
	if t.Scheme == partition.GPT {
		root.PTType, root.PTUUID = "gpt", t.DiskGUID.String()
	} else {
		root.PTType, root.PTUUID = "dos", fmt.Sprintf("%08x", t.DiskID)
	}
	for _, pt := range t.Partitions {
		start := pt.Start
		n := &Node{Name: fmt.Sprintf("%s%d", name, pt.Number), Kind: "part", Size: pt.Size, Start: &start,
			PartN: pt.Number, PartTName: pt.TypeName(), PartLabel: pt.Name, PartUUID: pt.PartUUID}
		if t.Scheme == partition.GPT {
			n.PartType = pt.Type.String()
		} else {
			n.PartType = fmt.Sprintf("0x%x", pt.MBRType)
		}
		root.Children = append(root.Children, n)
		if pt.Extended {
			continue
		}
		d, err := partition.Open(dev, pt, partition.DeviceOptions{ReadOnly: true})
		if err != nil {
			n.Note = err.Error()
			continue
		}
		err = fill(ctx, &o, n, d, pt.Size, 0)
		d.Close()
		if err != nil {
			return nil, err
		}
	}
	return root, nil
}

// fill identifies what dev holds and adds what is inside an unlocked
// volume or a PV as children.
func fill(ctx context.Context, o *TreeOptions, n *Node, dev io.ReaderAt, size int64, depth int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	info, err := Identify(dev, size)
	if errors.Is(err, ErrUnknown) && coreStorage(dev) {
		// FileVault 2, which blkid does not know.
		info, err = Info{Type: "fvault2", Usage: "crypto"}, nil
	}
	if err != nil {
		if !errors.Is(err, ErrUnknown) {
			n.Note = err.Error()
		}
		return nil
	}
	n.FSType, n.FSVer, n.Label, n.UUID = info.Type, info.Version, info.Label, info.UUID
	if depth >= o.MaxDepth {
		return nil
	}
	switch info.Type {
	case "crypto_LUKS", "BitLocker", "fvault2":
		if o.Unlock == nil {
			n.Note = "locked (no key given)"
			return nil
		}
		v, err := o.Unlock(ctx, readOnlyDev{dev, size}, size, info)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			n.Note = err.Error()
			return nil
		}
		defer v.Close()
		c := &Node{Name: n.Name + "_crypt", Kind: "crypt", Size: v.Size()}
		n.Children = append(n.Children, c)
		return fill(ctx, o, c, v, v.Size(), depth+1)
	case "LVM2_member":
		vg, err := lvm.Open(lvm.PVDevice{Name: n.Name, Dev: dev, Size: size, ReadOnly: true})
		if err != nil {
			n.Note = err.Error()
			return nil
		}
		for _, lv := range vg.LVs() {
			if !lv.Visible {
				continue
			}
			c := &Node{Name: vg.Name + "-" + lv.Name, Kind: "lvm", Size: lv.Size}
			n.Children = append(n.Children, c)
			d, err := vg.OpenLV(lv.Name)
			if err != nil {
				c.Note = err.Error()
				continue
			}
			err = fill(ctx, o, c, d, lv.Size, depth+1)
			d.Close()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// readOnlyDev hides a device's WriteAt, so that an unlock opens it
// read-only, and gives it a size.
type readOnlyDev struct {
	r    io.ReaderAt
	size int64
}

func (d readOnlyDev) ReadAt(b []byte, off int64) (int, error) { return d.r.ReadAt(b, off) }
func (d readOnlyDev) Size() (int64, error)                    { return d.size, nil }

// coreStorage reports a Core Storage (FileVault 2) physical volume
// header: "CS" at byte 88 of the first 512, whose CRC32C (seeded with
// 0xffffffff, stored with the seed in its first 8 bytes, not inverted)
// holds.
func coreStorage(dev io.ReaderAt) bool {
	b := make([]byte, 512)
	if n, _ := dev.ReadAt(b, 0); n < len(b) || b[88] != 'C' || b[89] != 'S' {
		return false
	}
	val, seed := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:])
	return seed == 0xffffffff && ^crc32.Update(^seed, crc32.MakeTable(crc32.Castagnoli), b[8:]) == val
}

// WriteTree prints the tree as `lsblk -f` does, with the partition
// columns of `lsblk -o +PARTTYPENAME,PARTLABEL,SIZE` and a NOTE.
func WriteTree(w io.Writer, root *Node) error {
	tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
	fmt.Fprintln(tw, "NAME\tFSTYPE\tFSVER\tLABEL\tUUID\tPARTTYPENAME\tPARTLABEL\tSIZE\tNOTE")
	var walk func(n *Node, prefix, branch string)
	walk = func(n *Node, prefix, branch string) {
		fsType := n.FSType
		if fsType == "" && n.PTType != "" {
			fsType = n.PTType
		}
		uuid := n.UUID
		if uuid == "" && n.Kind == "disk" {
			uuid = n.PTUUID
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", prefix+branch, n.Name, fsType, n.FSVer, n.Label, uuid,
			n.PartTName, n.PartLabel, HumanSize(n.Size), n.Note)
		next := prefix
		switch branch {
		case "├─":
			next += "│ "
		case "└─":
			next += "  "
		}
		for i, c := range n.Children {
			b := "├─"
			if i == len(n.Children)-1 {
				b = "└─"
			}
			walk(c, next, b)
		}
	}
	walk(root, "", "")
	return tw.Flush()
}

// WriteJSON prints the tree in `lsblk -J -f`'s shape: {"blockdevices":
// [root]} with Node's fields, indented by two spaces.
func WriteJSON(w io.Writer, root *Node) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		BlockDevices []*Node `json:"blockdevices"`
	}{[]*Node{root}})
}

// HumanSize is lsblk's SIZE column: binary units, one decimal when
// needed ("512B", "8M", "1.5G").
func HumanSize(n int64) string {
	units := "BKMGTPE"
	f := float64(n)
	i := 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%dB", n)
	}
	if f == float64(int64(f)) {
		return fmt.Sprintf("%d%c", int64(f), units[i])
	}
	return fmt.Sprintf("%.1f%c", f, units[i])
}
