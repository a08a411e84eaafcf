package cli

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/internal/oracle"
	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

func needTool(t *testing.T, name, pkg string) {
	t.Helper()
	testenv.Need(t, name, pkg)
}

// serveInBackground runs `blkcrypt serve` in-process on a Unix socket and
// returns the socket path and a stop function that waits for a clean exit.
func serveInBackground(t *testing.T, args ...string) (string, func() int) {
	t.Helper()
	return serveWithStdin(t, nil, args...)
}

// serveWithStdin is serveInBackground with stdin (a passphrase line).
func serveWithStdin(t *testing.T, stdin []byte, args ...string) (string, func() int) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "nbd.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var errb bytes.Buffer
	go func() {
		env := &Env{Stdin: bytes.NewReader(stdin), Stdout: &bytes.Buffer{}, Stderr: &errb}
		done <- Main(ctx, append([]string{"serve", "--listen", "unix:" + sock}, args...), env)
	}()
	for i := 0; i < 200; i++ {
		if testenv.UnixListening(sock) {
			break
		}
		select {
		case code := <-done:
			t.Fatalf("serve exited early with %d: %s", code, errb.String())
		case <-time.After(25 * time.Millisecond):
		}
	}
	return sock, func() int {
		cancel()
		select {
		case code := <-done:
			return code
		case <-time.After(30 * time.Second):
			t.Fatal("serve did not stop after cancellation")
			return -1
		}
	}
}

// TestServePlain: nbdinfo sees the volume, qemu-img copies it out through
// NBD and the copy equals `blkcrypt read`; a write through nbdcopy lands
// encrypted, and a read-only export refuses writes.
func TestServePlain(t *testing.T) {
	needTool(t, "nbdinfo", "libnbd-bin")
	needTool(t, "nbdcopy", "libnbd-bin")
	needTool(t, "qemu-img", "qemu-utils")
	dir := t.TempDir()
	img := writeFile(t, dir, "disk.img", randBytes(4<<20))
	vkf := writeFile(t, dir, "vk", randBytes(64))
	vol := []string{img, "--type", "plain", "--volume-key-file", vkf, "--key-size", "512", "--sector-size", "4096"}
	sock, stop := serveInBackground(t, vol...)
	uri := "nbd+unix:///?socket=" + sock
	out, err := exec.Command("nbdinfo", "--json", uri).Output()
	if err != nil {
		t.Fatalf("nbdinfo: %v", err)
	}
	var info struct {
		Exports []struct {
			Size    int64 `json:"export-size"`
			Min     int64 `json:"block_size_minimum"`
			Pref    int64 `json:"block_size_preferred"`
			RO      bool  `json:"is_read_only"`
			Flush   bool  `json:"can_flush"`
			MultiCn bool  `json:"can_multi_conn"`
		} `json:"exports"`
	}
	if err := json.Unmarshal(out, &info); err != nil || len(info.Exports) != 1 {
		t.Fatalf("nbdinfo json: %v %s", err, out)
	}
	e := info.Exports[0]
	if e.Size != 4<<20 || e.Min != 4096 || e.Pref < 4096 || e.RO || !e.Flush || !e.MultiCn {
		t.Fatalf("nbdinfo reports %+v", e)
	}
	// Write through nbdcopy, then copy everything out with qemu-img.
	data := randBytes(1 << 20)
	src := writeFile(t, dir, "src", data)
	if out, err := exec.Command("nbdcopy", src, uri).CombinedOutput(); err != nil {
		// nbdcopy copies the whole source; the destination is larger, which is fine.
		t.Fatalf("nbdcopy: %v %s", err, out)
	}
	outImg := filepath.Join(dir, "out.raw")
	if out, err := exec.Command("qemu-img", "convert", "-f", "raw", "-O", "raw", uri, outImg).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img convert: %v %s", err, out)
	}
	if code := stop(); code != 0 {
		t.Fatalf("serve exited with %d", code)
	}
	got, _ := os.ReadFile(outImg)
	if !bytes.Equal(got[:len(data)], data) {
		t.Fatal("qemu-img read back something other than what nbdcopy wrote")
	}
	code, plainOut, e2 := run(t, nil, append([]string{"read"}, vol...)...)
	if code != 0 || plainOut != string(got) {
		t.Fatalf("blkcrypt read after serve differs from the NBD view (%d %s)", code, e2)
	}

	// Read-only export: nbdcopy into it fails and the image stays the same.
	before := fileSum(t, img)
	sock, stop = serveInBackground(t, append(vol, "--read-only")...)
	if err := exec.Command("nbdcopy", src, "nbd+unix:///?socket="+sock).Run(); err == nil {
		t.Fatal("nbdcopy wrote to a read-only export")
	}
	if code := stop(); code != 0 {
		t.Fatalf("serve exited with %d", code)
	}
	if fileSum(t, img) != before {
		t.Fatal("a read-only export changed the image")
	}
}

// TestServeLUKSDecryptsWithCryptsetupKey: clients write through `serve` to a
// LUKS volume cryptsetup made; after the server stops, OpenSSL decrypts the
// image with the volume key cryptsetup reports, sector by sector, to what
// the clients wrote. Also nbdcopy reads it back and qemu-img compares.
func TestServeLUKSDecryptsWithCryptsetupKey(t *testing.T) {
	needTool(t, "nbdcopy", "libnbd-bin")
	needTool(t, "qemu-img", "qemu-utils")
	dir := t.TempDir()
	img := writeFile(t, dir, "luks.img", make([]byte, 20<<20))
	pass := writeFile(t, dir, "pass", []byte("serve-test"))
	if out, err := cryptsetup(t, "luksFormat", "-q", "--type", "luks2", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000",
		"--sector-size", "4096", "--key-file", pass, img); err != nil {
		t.Fatalf("cryptsetup luksFormat: %v %s", err, out)
	}
	if typ := detectTypeContext(context.Background(), img); typ != "luks2" {
		t.Fatalf("cryptsetup's LUKS2 image detected as %q", typ)
	}
	sock, stop := serveInBackground(t, img, "--key-file", pass)
	uri := "nbd+unix:///?socket=" + sock
	data := randBytes(2 << 20)
	src := writeFile(t, dir, "src", data)
	if out, err := exec.Command("nbdcopy", src, uri).CombinedOutput(); err != nil {
		t.Fatalf("nbdcopy: %v %s", err, out)
	}
	back := filepath.Join(dir, "back")
	if out, err := exec.Command("nbdcopy", uri, back).CombinedOutput(); err != nil {
		t.Fatalf("nbdcopy back: %v %s", err, out)
	}
	if out, err := exec.Command("qemu-img", "compare", "-f", "raw", "-F", "raw", back, uri).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img compare: %v %s", err, out)
	}
	if code := stop(); code != 0 {
		t.Fatalf("serve exited %d", code)
	}
	dump, err := cryptsetup(t, "luksDump", "--dump-volume-key", "-q", "--key-file", pass, img)
	if err != nil {
		t.Fatal(dump)
	}
	vk, _ := hex.DecodeString(volumeKeyOf(dump))
	if len(vk) != 64 {
		t.Fatalf("volume key of %d bytes from %q", len(vk), dump)
	}
	o := oracle.New(t)
	raw, _ := os.ReadFile(img)
	const dataOff, ss = 16 << 20, 4096
	for i := 0; i < len(data)/ss; i++ {
		pt, err := o.Crypt("aes-256-xts", vk, plainIV(uint64(i*ss/512)), raw[dataOff+i*ss:dataOff+(i+1)*ss], false)
		if err != nil || !bytes.Equal(pt, data[i*ss:(i+1)*ss]) {
			t.Fatalf("sector %d: OpenSSL with cryptsetup's key decrypts to something else (%v)", i, err)
		}
	}
}
