package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// stepClock is a clock that moves step forward at every reading, so that
// progress lines come out without a test that waits.
func stepClock(step time.Duration) func() time.Time {
	t := time.Unix(1e9, 0)
	return func() time.Time { t = t.Add(step); return t }
}

var (
	progressLine = regexp.MustCompile(`^\x1b\[2K\rProgress: +\d+\.\d%, ETA \d\dm\d\ds, +\d+ MiB (written|read), speed +\d+\.\d (Ki|Mi|Gi)?B/s$`)
	finishedLine = regexp.MustCompile(`^(\x1b\[2K\r)?Finished, time \d\dm\d\ds, +(\d+) MiB (written|read), speed +\d+\.\d (Ki|Mi|Gi)?B/s$`)
)

// TestProgress: write and read of more than 64 MiB show cryptsetup's
// progress line on a terminal (stderr) and nothing in a pipe unless
// asked; --progress-frequency prints lines, --progress-json JSON objects;
// -q prints nothing; a small job prints nothing.
func TestProgress(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "p.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 100<<20); err != nil {
		t.Fatal(err)
	}
	vk := writeFile(t, dir, "vk", randBytes(32))
	in := writeFile(t, dir, "in", randBytes(80<<20))
	small := writeFile(t, dir, "small", randBytes(64<<20))
	plainArgs := []string{"--type", "plain", "--volume-key-file", vk}
	runP := func(tty bool, args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		env := &Env{Stdin: bytes.NewReader(nil), Stdout: &out, Stderr: &errb, StderrIsTerminal: tty, Now: stepClock(300 * time.Millisecond)}
		code := Main(context.Background(), append(args, plainArgs...), env)
		return code, out.String(), errb.String()
	}
	// A terminal: "\x1b[2K\rProgress: …" lines, then one Finished line.
	for _, c := range [][]string{{"write", img, "-i", in}, {"read", img, "--length", "80M", "-o", filepath.Join(dir, "out")}} {
		code, _, errs := runP(true, c...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", c, code, errs)
		}
		lines := splitProgress(errs)
		if len(lines) < 3 {
			t.Fatalf("%v: %d progress lines: %q", c, len(lines), errs)
		}
		for _, l := range lines[:len(lines)-1] {
			if !progressLine.MatchString(l) {
				t.Errorf("%v: progress line %q", c, l)
			}
		}
		m := finishedLine.FindStringSubmatch(strings.TrimSuffix(lines[len(lines)-1], "\n"))
		if m == nil || m[2] != "80" || !strings.HasSuffix(errs, "\n") {
			t.Errorf("%v: last line %q", c, lines[len(lines)-1])
		}
	}
	// No terminal, -q, or 64 MiB or less: nothing.
	for _, c := range []struct {
		tty  bool
		args []string
	}{{false, []string{"write", img, "-i", in}}, {true, []string{"write", img, "-i", in, "-q"}}, {true, []string{"write", img, "-i", small}}} {
		if code, _, errs := runP(c.tty, c.args...); code != 0 || errs != "" {
			t.Errorf("%v (terminal %v): exit %d, stderr %q", c.args, c.tty, code, errs)
		}
	}
	// Asked for in a pipe: lines every N seconds, or JSON.
	code, _, errs := runP(false, "write", img, "-i", in, "--progress-frequency", "1")
	if code != 0 || strings.Contains(errs, "\x1b") || !strings.HasSuffix(errs, "\n") {
		t.Fatalf("--progress-frequency: exit %d, stderr %q", code, errs)
	}
	lines := strings.Split(strings.TrimSuffix(errs, "\n"), "\n")
	if len(lines) < 2 || !finishedLine.MatchString(lines[len(lines)-1]) {
		t.Fatalf("--progress-frequency lines %q", lines)
	}
	for _, l := range lines[:len(lines)-1] {
		if !progressLine.MatchString("\x1b[2K\r" + l) {
			t.Errorf("--progress-frequency line %q", l)
		}
	}
	code, _, errs = runP(false, "write", img, "-i", in, "--progress-json")
	if code != 0 {
		t.Fatalf("--progress-json: exit %d, %s", code, errs)
	}
	lines = strings.Split(strings.TrimSuffix(errs, "\n"), "\n")
	var last map[string]string
	for _, l := range lines {
		last = nil
		if err := json.Unmarshal([]byte(l), &last); err != nil {
			t.Fatalf("--progress-json line %q: %v", l, err)
		}
		for _, k := range []string{"device", "device_bytes", "device_size", "speed", "eta_ms", "time_ms"} {
			if _, ok := last[k]; !ok {
				t.Errorf("--progress-json line %q has no %s", l, k)
			}
		}
	}
	if len(lines) < 2 || last["device_bytes"] != "83886080" || last["device_size"] != "83886080" || last["device"] != img {
		t.Errorf("--progress-json: %d lines, last %v", len(lines), last)
	}
}

// splitProgress cuts terminal progress output at each line clear.
func splitProgress(s string) []string {
	var out []string
	for _, p := range strings.Split(s, "\x1b[2K\r") {
		if p != "" {
			out = append(out, "\x1b[2K\r"+p)
		}
	}
	return out
}

func TestProgressFormat(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "00m00s", 65 * time.Second: "01m05s", 3725 * time.Second: "1h02m05s"} {
		if got := clock(d); got != want {
			t.Errorf("clock(%v) = %q, want %q", d, got, want)
		}
	}
	for bps, want := range map[float64]string{0: "  0.0 B/s", 2048: "  2.0 KiB/s", 262.4 * (1 << 20): "262.4 MiB/s", 3 << 30: "  3.0 GiB/s"} {
		if got := speedStr(bps); got != want {
			t.Errorf("speedStr(%v) = %q, want %q", bps, got, want)
		}
	}
}

// TestReencryptProgress: reencrypt prints cryptsetup's progress, as JSON
// with --progress-json (one object per hotzone step the clock allows, the
// last with every byte done) and as lines on a terminal.
func TestReencryptProgress(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "r.img")
	pass := writeFile(t, dir, "p", []byte("progress"))
	if code, _, e := run(t, nil, append([]string{"format", img, "--type", "luks2", "--size", "88080384", "--key-file", pass, "-q"}, reencFast...)...); code != 0 {
		t.Fatalf("format: %s", e)
	}
	runP := func(tty bool, args ...string) (int, string) {
		var out, errb bytes.Buffer
		env := &Env{Stdin: bytes.NewReader(nil), Stdout: &out, Stderr: &errb, StderrIsTerminal: tty, Now: stepClock(600 * time.Millisecond)}
		code := Main(context.Background(), append(append([]string{"reencrypt", img, "--key-file", pass, "--hotzone-size", "4M"}, reencFast...), args...), env)
		return code, errb.String()
	}
	code, errs := runP(false, "--progress-json")
	if code != 0 {
		t.Fatalf("reencrypt --progress-json: exit %d: %s", code, errs)
	}
	var objs []map[string]string
	for _, l := range strings.Split(strings.TrimSpace(errs), "\n") {
		var m map[string]string
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON progress object: %q", l)
		}
		objs = append(objs, m)
	}
	if len(objs) < 3 {
		t.Fatalf("%d progress objects for a multi-hotzone run: %q", len(objs), errs)
	}
	last := objs[len(objs)-1]
	if last["device_bytes"] != last["device_size"] || last["device_size"] == "0" {
		t.Fatalf("last progress object %v: not every byte done", last)
	}
	code, errs = runP(true)
	if code != 0 {
		t.Fatalf("reencrypt on a terminal: exit %d: %s", code, errs)
	}
	lines := splitProgress(errs)
	if len(lines) < 2 || !strings.Contains(lines[len(lines)-1], "Finished, time") || !strings.Contains(errs, "MiB reencrypted") {
		t.Fatalf("terminal progress: %q", errs)
	}
	if code, _ := runP(false); code != 0 {
		t.Fatal("reencrypt without a terminal failed")
	}
}
