package probe

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/internal/imagetest"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// TestTree: the tree of a debian-installer image (imagetest.Debian) is
// what sgdisk, blkid -p and lvm2 say: the partitions where sgdisk put
// them, each partition's and each LV's identity as blkid -p gives it for
// the same bytes cut out, and inside the LUKS2 volume (opened through the
// Unlock hook with blkcrypt.OpenDevice) the PV with vg0's two LVs.
func TestTree(t *testing.T) {
	sgdisk := testenv.Need(t, "sgdisk", "gdisk")
	d := imagetest.NewDebian(t, imagetest.DebianOptions{RootMiB: 16, BigFileSize: 64 << 10})
	key, err := os.ReadFile(d.Key)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(d.Disk)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	unlocked := 0
	root, err := Tree(context.Background(), f, st.Size(), "disk", TreeOptions{
		Unlock: func(ctx context.Context, dev io.ReaderAt, size int64, info Info) (Volume, error) {
			unlocked++
			v, err := blkcrypt.OpenDevice(ctx, dev, blkcrypt.OpenOptions{Passphrase: key, ReadOnly: true})
			if err != nil {
				return nil, err
			}
			return v, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command(sgdisk, "-p", d.Disk).Output()
	if root.PTType != "gpt" || !strings.Contains(strings.ToLower(string(out)), "disk identifier (guid): "+root.PTUUID) {
		t.Errorf("disk %s %s; sgdisk -p: %s", root.PTType, root.PTUUID, out)
	}
	if len(root.Children) != 3 || unlocked != 1 {
		t.Fatalf("%d partitions, %d unlocked", len(root.Children), unlocked)
	}
	cut := func(name string, b []byte) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	disk, _ := os.ReadFile(d.Disk)
	for i, n := range root.Children {
		num := i + 1
		if n.PartN != num || *n.Start != d.PartStart[num] || n.Size != d.PartSize[num] {
			t.Errorf("partition %d: %+v; sgdisk: start %d, size %d", num, n, d.PartStart[num], d.PartSize[num])
		}
		want := blkid(t, cut("p", disk[d.PartStart[num]:][:d.PartSize[num]]))
		if n.FSType != want.Type || n.UUID != want.UUID || n.Label != want.Label || n.FSVer != want.Version {
			t.Errorf("partition %d: %s %s %q %s; blkid -p: %+v", num, n.FSType, n.UUID, n.Label, n.FSVer, want)
		}
	}
	luks := root.Children[2]
	if len(luks.Children) != 1 || luks.Children[0].Kind != "crypt" {
		t.Fatalf("inside partition 3: %+v", luks.Children)
	}
	pv := luks.Children[0]
	if want := blkid(t, cut("pv", d.Plain)); pv.FSType != want.Type || pv.UUID != want.UUID || pv.Size < int64(len(d.Plain)) {
		t.Errorf("the PV: %+v; blkid -p of lvm2's PV: %+v", pv, want)
	}
	lvs := map[string]*Node{}
	for _, c := range pv.Children {
		lvs[c.Name] = c
	}
	rootLV := lvs["vg0-root"]
	if len(lvs) != 2 || rootLV == nil || lvs["vg0-swap"] == nil || lvs["vg0-swap"].FSType != "swap" {
		t.Fatalf("LVs: %+v", pv.Children)
	}
	if want := blkid(t, cut("root", d.RootBytes())); rootLV.FSType != want.Type || rootLV.UUID != want.UUID || rootLV.Label != want.Label || rootLV.Size != d.RootSize {
		t.Errorf("vg0/root: %+v; blkid -p of lvm2's LV: %+v, lvs size %d", rootLV, want, d.RootSize)
	}
	// Without Unlock the volume stays locked, and says so.
	locked, err := Tree(context.Background(), f, st.Size(), "disk", TreeOptions{})
	if err != nil || len(locked.Children[2].Children) != 0 || !strings.Contains(locked.Children[2].Note, "locked") {
		t.Errorf("without a key: %v %+v", err, locked.Children[2])
	}
	// The JSON is lsblk's shape; the text form names every device.
	b, _ := json.Marshal(root)
	var back Node
	if err := json.Unmarshal(b, &back); err != nil || back.Children[2].Children[0].Children[0].Name == "" || bytes.Contains(b, []byte("Warnings")) {
		t.Errorf("JSON: %v %s", err, b)
	}
	var text bytes.Buffer
	if err := WriteTree(&text, root); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"disk1", "disk3_crypt", "vg0-root", "LVM2_member", "crypto_LUKS", "cryptroot"} {
		if !strings.Contains(text.String(), s) {
			t.Errorf("the text tree lacks %q:\n%s", s, text.String())
		}
	}
	// A cancelled context stops the tree.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Tree(ctx, f, st.Size(), "disk", TreeOptions{}); err == nil {
		t.Errorf("Tree with a cancelled context succeeded")
	}
}

// TestWriteJSON: lsblk -J's frame, {"blockdevices": [...]} (util-linux
// 2.38's lsblk -J prints that shape; it indents by three spaces, we by
// two), with the tree nested in "children" and empty fields left out.
func TestWriteJSON(t *testing.T) {
	start := int64(1 << 20)
	root := &Node{Name: "disk", Kind: "disk", Size: 8 << 20, PTType: "gpt",
		Children: []*Node{{Name: "disk1", Kind: "part", Size: 4 << 20, Start: &start, PartN: 1, FSType: "ext4"}}}
	var b bytes.Buffer
	if err := WriteJSON(&b, root); err != nil {
		t.Fatal(err)
	}
	want := `{
  "blockdevices": [
    {
      "name": "disk",
      "kind": "disk",
      "size": 8388608,
      "pttype": "gpt",
      "children": [
        {
          "name": "disk1",
          "kind": "part",
          "size": 4194304,
          "start": 1048576,
          "partn": 1,
          "fstype": "ext4"
        }
      ]
    }
  ]
}
`
	if b.String() != want {
		t.Errorf("WriteJSON:\n%s\nwant:\n%s", b.String(), want)
	}
}
