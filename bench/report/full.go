package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

var (
	full   = flag.Bool("full", false, "run every benchmark and write the whole of BENCHMARKS.md (what bench/all.sh does)")
	quick  = flag.Bool("quick", false, "with -full: tiny sizes and one round, to check the generator (figures meaningless; no run is saved)")
	outArg = flag.String("o", "", "with -full: write the document here (default stdout)")
	runDir = flag.String("runs", "bench/runs", "with -full: folder of the saved results of each run (read for the history table, this run added)")
	readme = flag.String("readme", "README.md", "with -full (not -quick): README whose figures block is rewritten from this run (empty: leave it)")
)

// A target is one promise of the project's issues, checked against the
// figures of this run. Every key must reach min (or, with atMost, stay at
// or below it) for the target to count as met; a key the run did not
// measure makes it "not measured", never met.
type target struct {
	area, what string
	keys       []string // results keys
	labels     []string // how each key is named in the result cell
	min        float64
	atMost     bool // allocs: the figure must not exceed min
	record     bool // no target: the figure is recorded only
	unit       string
}

var targets = []target{
	// Issue #14: against the Linux kernel's own code, measured in this run.
	{area: "xts", what: "`xts(aes)` at 4096 B, one call per unit, ≥ 1.0× the kernel's best driver (#14)",
		keys:   []string{"xtskernel.aes256.enc4096", "xtskernel.aes256.dec4096", "xtskernel.aes128.enc4096", "xtskernel.aes128.dec4096"},
		labels: []string{"AES-256 enc", "AES-256 dec", "AES-128 enc", "AES-128 dec"}, min: 1.0},
	{area: "xts", what: "AES-256-XTS, 256 sectors of 512 B in one call, ≥ 1.75× the kernel's single-call 512 B (#14)",
		keys: []string{"xtskernel.batch512"}, min: 1.75},
	{area: "xts", what: "that batch as a share of the AES-unit limit (#14: about 90%)",
		keys: []string{"xtskernel.limit_fraction.batch512"}, record: true, unit: "%"},
	{area: "cbc", what: "`aes-cbc-essiv:sha256` batch encryption ≥ 0.9× our XTS on the same batch (#14)",
		keys: []string{"cbc.essiv_batch_vs_xts"}, min: 0.9},
	{area: "cbc", what: "CBC-ESSIV decryption at 4096 B ≥ 1.0× the kernel's XTS decryption (#14)",
		keys: []string{"cbc.dec4096_vs_kernel_xts"}, min: 1.0},
	{area: "capi", what: "the best fused ESSIV driver ≥ 1.5× the template at 16 B, in each of five consecutive runs (#14)",
		keys:   []string{"capi.fused5.best.run1", "capi.fused5.best.run2", "capi.fused5.best.run3", "capi.fused5.best.run4", "capi.fused5.best.run5"},
		labels: []string{"1", "2", "3", "4", "5"}, min: 1.5},
	{area: "capi", what: "fused `essiv-cbc-aes-sha256-aesni` ≥ 1.5× the template at 16 B, in each of five consecutive runs (#14)",
		keys:   []string{"capi.fused5.aesni.run1", "capi.fused5.aesni.run2", "capi.fused5.aesni.run3", "capi.fused5.aesni.run4", "capi.fused5.aesni.run5"},
		labels: []string{"1", "2", "3", "4", "5"}, min: 1.5},
	{area: "adiantum", what: "`adiantum(xchacha12,aes)` at 4096 B ≥ 2 GB/s per core (#14)",
		keys: []string{"adiantum.mbs4096"}, min: 2000, unit: "MB/s"},
	{area: "adiantum", what: "Adiantum at 4096 B next to `xts(aes)` and `openssl speed -evp chacha20`",
		keys: []string{"adiantum.vs_xts", "adiantum.vs_chacha20"}, labels: []string{"vs xts(aes)", "vs chacha20"}, record: true},
	{area: "path", what: "1 GiB tmpfs volume, aes-xts-plain64: `blkcrypt read`/`write` vs qemu-img convert, same LUKS1 image (#14 item 5)",
		keys: []string{"path.xts.read.qemu-img", "path.xts.write.qemu-img"}, labels: []string{"read", "write"}, record: true},
	{area: "path", what: "same, NBD sequential read/write vs nbdkit-luks and qemu-nbd",
		keys:   []string{"path.xts.nbdread.nbdkit-luks", "path.xts.nbdwrite.nbdkit-luks", "path.xts.nbdread.qemu-nbd", "path.xts.nbdwrite.qemu-nbd"},
		labels: []string{"read, nbdkit", "write, nbdkit", "read, qemu", "write, qemu"}, record: true},
	{area: "path", what: "1 GiB tmpfs volume, aes-cbc-essiv:sha256: read/write vs qemu-img, NBD read/write vs qemu-nbd",
		keys:   []string{"path.essiv.read.qemu-img", "path.essiv.write.qemu-img", "path.essiv.nbdread.qemu-nbd", "path.essiv.nbdwrite.qemu-nbd"},
		labels: []string{"read", "write", "NBD read", "NBD write"}, record: true},
	// Issue #15: offline reencryption.
	{area: "reencrypt", what: "`blkcrypt reencrypt` of a 1 GiB LUKS2 image ≥ 2× `cryptsetup reencrypt --force-offline-reencrypt` (#15)",
		keys: []string{"reencrypt.vs_cryptsetup.checksum", "reencrypt.vs_cryptsetup.none"}, labels: []string{"checksum", "none"}, min: 2},
	{area: "reencrypt", what: "`blkcrypt reencrypt` ≥ 0.5× blkcrypt's own read + write of the volume (#15)",
		keys: []string{"reencrypt.vs_readwrite.checksum", "reencrypt.vs_readwrite.none"}, labels: []string{"checksum", "none"}, min: 0.5},

	{area: "kernels", what: "`xts(aes)` 512-bit key at 4096 B vs `openssl aes-256-xts` (3.0; the old 1.5× target, replaced by the kernel's)",
		keys: []string{"kernels.xts512"}, record: true},
	{area: "kernels", what: "`xts(aes)` 256-bit key at 4096 B vs `openssl aes-128-xts` (3.0; the old 1.5× target, replaced by the kernel's)",
		keys: []string{"kernels.xts256"}, record: true},
	{area: "kernels", what: "`aes-cbc-essiv:sha256` sector encryption ≥ 5× OpenSSL CBC encrypt at 512 B",
		keys: []string{"kernels.essiv_enc"}, min: 5},
	{area: "kernels", what: "CBC decryption ≥ 1.2× OpenSSL at 512 B",
		keys: []string{"kernels.cbc_dec"}, min: 1.2},
	{area: "kernels", what: "one 512-byte sector through the whole sector path ≥ 1.0× OpenSSL",
		keys: []string{"kernels.one_sector"}, min: 1.0},
	{area: "sector", what: "2-core/1-core scaling on 1 MiB batches ≥ 1.8×",
		keys:   []string{"sector.scaling.aes-xts-plain64", "sector.scaling.aes-cbc-essiv:sha256", "sector.scaling.serpent-xts-plain64"},
		labels: []string{"AES-XTS", "AES-CBC-ESSIV", "Serpent-XTS"}, min: 1.8},
	{area: "sector", what: "0 allocs/op on the batch path", keys: []string{"sector.allocs"}, min: 0, atMost: true, unit: "allocs"},
	{area: "luks", what: "`read` of a 1 GiB volume next to `qemu-img convert` (LUKS1)", keys: []string{"luks.read_vs_qemu"}, record: true},
	// Issue #25: the format-neutral sector map costs nothing on the data path.
	{area: "datapath", what: "the Volume's data path after/before the handle, engine and sector map (#25; 1.0 is no change, ≥ 0.95 allows noise)",
		keys:   []string{"datapath.read_4K", "datapath.write_4K", "datapath.read_1024K", "datapath.write_1024K"},
		labels: []string{"read 4K", "write 4K", "read 1M", "write 1M"}, min: 0.95},
	// Issue #26: a file out of an image as fast as the volume under it.
	{area: "images", what: "`cat` of a 256 MiB ext4 file through GPT, LUKS2 and LVM ≥ 0.8× `read` of as many bytes of the volume (#26)",
		keys: []string{"image.cat_vs_read"}, min: 0.8},
	// Issue #29: authenticated sectors.
	{area: "aead", what: "AES-256-GCM per 4096-byte sector ≥ 1.2× OpenSSL 3's (#29)", keys: []string{"aead.gcm_vs_openssl3"}, min: 1.2},
	{area: "aead", what: "AEGIS-128 per 4096-byte sector ≥ 1.5× our AES-GCM (#29)", keys: []string{"aead.aegis_vs_gcm"}, min: 1.5},
	{area: "aead", what: "a LUKS2 --integrity aead volume (aes-gcm-random)'s sequential read/write ≥ 0.5× a plain LUKS2 volume's (journal mode; #29)",
		keys:   []string{"aead.volume_gcm_random_read", "aead.volume_gcm_random_write"},
		labels: []string{"read", "write"}, min: 0.5},
	// authenc hmac(sha256) is bound by SHA-256 (its per-sector row in the
	// aead section): recorded, not judged by the AEAD volume's target.
	{area: "aead", what: "the same for aes-xts-plain64 with hmac-sha256 (journal mode; SHA-256 bound)",
		keys:   []string{"aead.volume_xts_hmac_sha256_read", "aead.volume_xts_hmac_sha256_write"},
		labels: []string{"read", "write"}, record: true},
	{area: "aead", what: "AES-256-GCM per 4096-byte sector against the kernel's aes-gcm-avx10 (6.12, in userspace; zmm and ymm drivers)",
		keys: []string{"aead.gcm_vs_kernel_k512", "aead.gcm_vs_kernel_k256"}, labels: []string{"vs avx10_512", "vs avx10_256"}, record: true},
	{area: "aead", what: "AEGIS-128 per 4096-byte sector against the kernel's aegis128-aesni (6.12, in userspace)",
		keys: []string{"aead.aegis_vs_kernel"}, record: true},
	{area: "nbd", what: "read/write ≥ 2× nbdkit-luks", keys: []string{"nbd.read.nbdkit-luks", "nbd.write.nbdkit-luks"},
		labels: []string{"read", "write"}, min: 2},
	{area: "nbd", what: "read/write ≥ 3× qemu-nbd (with multi-conn)", keys: []string{"nbd.read.qemu-nbd", "nbd.write.qemu-nbd"},
		labels: []string{"read", "write"}, min: 3},
	{area: "nbd", what: "read/write ≥ 0.8× the unencrypted nbdkit export", keys: []string{"nbd.read.nbdkit-file", "nbd.write.nbdkit-file"},
		labels: []string{"read", "write"}, min: 0.8},
}

// verdict returns the result cell and "yes", "no", "recorded" or "not
// measured" for one target.
func (tg target) verdict(r map[string]float64) (string, string) {
	var cells []string
	met, missing := true, false
	for i, k := range tg.keys {
		v, ok := r[k]
		c := "–"
		if ok {
			if tg.unit == "%" {
				c = fmt.Sprintf("%.0f%%", 100*v)
			} else if tg.unit != "" {
				c = fmt.Sprintf("%.0f %s", v, tg.unit)
			} else {
				c = fmt.Sprintf("%.2f×", v)
			}
			if tg.atMost && v > tg.min || !tg.atMost && v < tg.min {
				met = false
			}
		} else {
			missing = true
		}
		if i < len(tg.labels) {
			c += " (" + tg.labels[i] + ")"
		}
		cells = append(cells, c)
	}
	switch {
	case missing:
		return strings.Join(cells, ", "), "not measured"
	case tg.record:
		return strings.Join(cells, ", "), "recorded"
	case met:
		return strings.Join(cells, ", "), "yes"
	}
	return strings.Join(cells, ", "), "no"
}

// run is what a run saves in bench/runs/<id>.json, so that later runs can
// show it beside theirs: only figures this generator measured.
type run struct {
	ID      string             `json:"id"`
	Date    string             `json:"date"`
	CPU     string             `json:"cpu"`
	Cores   int                `json:"cores"`
	Commit  string             `json:"commit"`
	Results map[string]float64 `json:"results"`
}

func gitOut(args ...string) string {
	b, err := exec.Command("git", args...).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// script runs one of the bench/*.sh scripts, returning its stdout and
// adding the "key value" lines it appends to $BENCH_RESULTS to results.
func script(env []string, name string, args ...string) (string, error) {
	f, err := os.CreateTemp("", "bench-results-")
	if err != nil {
		return "", err
	}
	f.Close()
	defer os.Remove(f.Name())
	cmd := exec.Command(name, args...)
	cmd.Env = append(append(os.Environ(), "BENCH_RESULTS="+f.Name()), env...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s: %w", name, err)
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		if !ok {
			continue
		}
		if x, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			record(k, x)
		}
	}
	return stdout.String(), nil
}

// goBenchLines runs go test benchmarks and keeps the Benchmark lines.
func goBenchLines(pkg, bench, benchtime string) string {
	b, err := exec.Command("go", "test", "-run", "XXX", "-bench", bench, "-benchtime", benchtime, pkg).CombinedOutput()
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Benchmark") {
			keep = append(keep, l)
		}
	}
	if err != nil {
		keep = append(keep, "(go test failed: "+strings.TrimSpace(err.Error())+")")
	}
	return strings.Join(keep, "\n")
}

func runFull() error {
	start := time.Now().UTC()
	commit := gitOut("rev-parse", "--short", "HEAD")
	if gitOut("status", "--porcelain", "--untracked-files=no") != "" {
		commit += "-dirty"
	}
	id := start.Format("20060102T1504Z")
	if commit != "" {
		id += "-" + commit
	}
	if *quick {
		id += "-quick"
		*sec = 0.05
		*rounds = 1
		*xsec = 0.05
		*aesSecs = 0.05
	}
	load, _ := os.ReadFile("/proc/loadavg")
	loadavg := strings.Join(strings.Fields(string(load))[:min(3, len(strings.Fields(string(load))))], " ")

	var body bytes.Buffer
	out = &body
	fmt.Fprintln(out, "## Ciphers, sector layer and engine (`go run ./bench/report -svg bench/throughput.svg`)")
	fmt.Fprintln(out)
	t0 := time.Now()
	cipherTables()
	took("the cipher, sector and engine tables", t0)
	fmt.Fprintln(out)

	nbdSize, luksSize, pathSize, reencSize, env := "256", "1024", "1024", "1024", []string(nil)
	if *quick {
		nbdSize, luksSize, pathSize, reencSize, env = "16", "32", "32", "64", []string{"ROUNDS=1", "BENCH_ITER_TIME=50"}
	}
	for _, sec := range []struct{ title, script, size string }{
		{"NBD: sequential read and write through nbdcopy", "bench/nbd-compare.sh", nbdSize},
		{"LUKS", "bench/luks.sh", luksSize},
		{"The whole path: a volume on tmpfs read and written end to end (issue #14 item 5)", "bench/path.sh", pathSize},
		{"Reencryption: blkcrypt against cryptsetup (issue #15)", "bench/reencrypt.sh", reencSize},
		{"The data path before and after, and files out of images (issues #25, #26)", "bench/datapath.sh", ""},
		{"Authenticated sectors: AEAD per sector against OpenSSL 3, integrity volumes (issue #29)", "bench/aead.sh", ""},
		{"arm64: instructions per byte of AES-XTS counted under qemu-user, no arm64 timing (issue #27)", "bench/arm64-insn.sh", "2"},
	} {
		fmt.Fprintf(out, "## %s (`%s`)\n\n", sec.title, strings.TrimSpace(sec.script+" "+sec.size))
		t0 = time.Now()
		s, err := script(env, sec.script, sec.size)
		took(sec.script, t0)
		if err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			s += "\n(the script failed: " + err.Error() + ")\n"
		}
		fmt.Fprint(out, dropServing(s))
		fmt.Fprintln(out)
	}
	rbdSection() // bench/report/rbd.go
	fmt.Fprintln(out, "## Other formats")
	fmt.Fprintln(out)
	if *quick {
		fmt.Fprintln(out, "(-quick: the TrueCrypt header search, half a minute, is left out.)")
	} else {
		fmt.Fprintln(out, "TrueCrypt/VeraCrypt header search with a wrong passphrase (every hash, every cipher chain; the worst case a user waits for):")
		fmt.Fprintln(out)
		fmt.Fprintf(out, "```\n%s\n```\n", goBenchLines("./tcrypt", "Search/(all|truecrypt-only)", "1x"))
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "BitLocker read throughput of the fixture images (1 MiB reads; the plain-segment baseline is the same file mapped as one dm-crypt segment):")
	fmt.Fprintln(out)
	bt := "3x"
	if *quick {
		bt = "1x"
	}
	fmt.Fprintf(out, "```\n%s\n```\n", goBenchLines("./bitlk", "Read", bt))

	elapsed := time.Since(start).Round(time.Second)
	this := run{ID: id, Date: start.Format("2006-01-02"), CPU: cpuModel(), Cores: runtime.NumCPU(), Commit: commit, Results: results}
	history := loadRuns(*runDir)
	if !*quick {
		if err := saveRun(*runDir, this); err != nil {
			return err
		}
	}

	var doc bytes.Buffer
	writeHeader(&doc, this, loadavg, elapsed)
	writeTargets(&doc, this, history)
	writeCommentary(&doc, this)
	doc.Write(body.Bytes())

	if !*quick && *readme != "" {
		if err := updateReadme(*readme, this); err != nil {
			return err
		}
	}
	if *outArg == "" {
		_, err := os.Stdout.Write(doc.Bytes())
		return err
	}
	tmp := *outArg + ".new"
	if err := os.WriteFile(tmp, doc.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, *outArg)
}

// took tells the terminal how long a part of the run took, so that the
// run's budget can be kept (the document states only the total).
func took(what string, since time.Time) {
	fmt.Fprintf(os.Stderr, "report: %s took %s\n", what, time.Since(since).Round(time.Second))
}

func dropServing(s string) string {
	var keep []string
	for _, l := range strings.SplitAfter(s, "\n") {
		if !strings.HasPrefix(l, "blkcrypt: serving") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "")
}

func writeHeader(w io.Writer, r run, loadavg string, elapsed time.Duration) {
	fmt.Fprintf(w, "# blkcrypt benchmarks\n\n")
	fmt.Fprintf(w, "**Run %s** — %s, %d cores, %s, commit %s. Written in full by `bench/all.sh`\n", r.ID, r.CPU, r.Cores, r.Date, r.Commit)
	fmt.Fprintf(w, "(`go run ./bench/report -full`), which took %s; nothing below is edited by hand. The load\n", elapsed)
	fmt.Fprintf(w, "average when the run started was %s. The machines here are shared and noisy, so compare\n", loadavg)
	fmt.Fprintf(w, "the **ratios** within a table, not absolute figures across runs.\n\n")
	if *quick {
		fmt.Fprintf(w, "**This is a -quick run** (tiny sizes, one round): it checks the generator; its figures mean nothing.\n\n")
	}
}

func writeTargets(w io.Writer, r run, history []run) {
	fmt.Fprintf(w, "## Targets at a glance (run %s)\n\n", r.ID)
	fmt.Fprintln(w, "\"met\" is computed from this run's ratios against the target; a figure the run could not measure is \"not measured\".")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| area | target | result | met |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, tg := range targets {
		cell, met := tg.verdict(r.Results)
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", tg.area, tg.what, cell, met)
	}
	fmt.Fprintln(w)
	// Earlier runs saved by this generator, newest first, so the spread
	// between runs is shown rather than told.
	sort.Slice(history, func(i, j int) bool { return history[i].ID > history[j].ID })
	if len(history) > 4 {
		history = history[:4]
	}
	if len(history) == 0 {
		return
	}
	fmt.Fprintln(w, "The same targets in the runs before this one (from `bench/runs/`, each written by this generator):")
	fmt.Fprintln(w)
	fmt.Fprint(w, "| target | this run |")
	for _, h := range history {
		fmt.Fprintf(w, " %s (%s) |", h.ID, h.CPU)
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, "|---|---|")
	for range history {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	for _, tg := range targets {
		cell, _ := tg.verdict(r.Results)
		fmt.Fprintf(w, "| %s | %s |", tg.what, cell)
		for _, h := range history {
			c, _ := tg.verdict(h.Results)
			fmt.Fprintf(w, " %s |", c)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}

// figure formats a measured value for the commentary, or says it is missing.
func figure(r map[string]float64, key, format string) string {
	v, ok := r[key]
	if !ok {
		return "(not measured)"
	}
	return fmt.Sprintf(format, v)
}

// cpuFlags says which of the instructions the AES code chooses between
// this CPU has, so that a figure can be read against its CPU.
func cpuFlags() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	var have map[string]bool
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "flags") {
			have = map[string]bool{}
			for _, f := range strings.Fields(strings.SplitN(l, ":", 2)[1]) {
				have[f] = true
			}
			break
		}
	}
	if have == nil {
		return "CPU flags unknown"
	}
	var fs []string
	for _, f := range []string{"aes", "vaes", "vpclmulqdq", "avx2", "avx512f", "avx512vl"} {
		if have[f] {
			fs = append(fs, f)
		} else {
			fs = append(fs, "no "+f)
		}
	}
	return strings.Join(fs, ", ")
}

// writeCommentary explains how the tables are measured. Its figures come
// from this run; what it says without figures holds for any run.
func writeCommentary(w io.Writer, run run) {
	r := run.Results
	fmt.Fprintf(w, `**Where the figures come from.** Every figure in this file was measured in run %s, on one
machine: %s, %d vCPUs (%s). The AES-unit limit, measured by the XTS peers' `+"`clockaes`"+` in
this run, is %s B/cycle for AES-256 encryption, that is %s MB/s at %s GHz, the highest clock the
kernel's code saw in its rounds (the clock of these VMs moves by a third with load)%s. The kernel
and OpenSSL 4.0 figures come from `+"`../shared/peers/xts`"+` (the kernel's own
`+"`aes-xts-avx-x86_64.S`"+`, built in userspace) run pinned to one vCPU, taking turns with
blkcrypt round by round. A figure this run could not measure reads "not measured" or "–", never an
older number; earlier runs are only in the history table, each under its own CPU.

`, run.ID, run.CPU, run.Cores, cpuFlags(), figure(r, "aesunit.bpc.aes256", "%.2f"), figure(r, "aesunit.mbs.aes256.enc", "%.0f"),
		figure(r, "aesunit.ghz", "%.2f"), limitNote(r))
	fmt.Fprintf(w, `**How the ratios are taken.** Each ratio compares two sides measured one after the other on a
shared VM, so single ratios move by tens of percent between runs. The kernel ratios take each
side's best of %s; the scaling table takes the best of %s and also shows
the spread of the per-round ratios (medians this run: %s AES-XTS, %s AES-CBC-ESSIV, %s Serpent-XTS).

**XTS against the kernel.** This run: blkcrypt's one-call-per-unit `+"`xts(aes)`"+` at 4096 B is %s
(AES-256 encryption) and %s (decryption) the kernel's best driver, at %s of the AES-unit limit;
256 sectors of 512 B in one call reach %s the kernel's single-call 512 B figure (%s of the limit),
since the sector layer hands a whole batch to one call and the kernel's code takes one unit per
call. Against OpenSSL 3.0, whose XTS uses 128-bit AES-NI, the ratios are recorded only: %s
(512-bit key), %s (256-bit key).

**Scaling.** The engine's caller takes sectors from the front of a batch and the workers from the
back; each take claims an eighth of what is left (guided self-scheduling), and for CBC encryption
a multiple of 16 sectors, because the AES and Serpent kernels run 16 serial CBC chains side by
side. AES-XTS is the most memory-bound of the three: the probe table ("the machine's own ceiling")
shows what independent threads on private buffers reach on this machine.

**NBD.** Reads go to nbdcopy's `+"`null:`"+` destination, so the table measures the servers and not
nbdcopy writing its copy; the column that copies into a tmpfs file is kept, because on a 2-vCPU
machine nbdcopy holds one vCPU and caps every server near the same speed (blkcrypt read at %s
nbdkit-luks and %s qemu-nbd that way in this run). Every server runs in its best configuration for
nbdcopy, which opens 4 connections only to an export that advertises multi-conn: qemu-nbd 7.2
advertises it only with `+"`--shared`"+` other than 1, so it runs with `+"`--shared=8`"+`. The
configuration table under the NBD figures shows what each export advertised in this run.

**Reencryption** (#15) is timed on one LUKS2 image of %s MiB on tmpfs, every run starting from the
same copy: blkcrypt reencrypts at %s MB/s with checksum resilience and %s MB/s with none, cryptsetup at
%s and %s MB/s; blkcrypt's own read plus write of the volume comes to %s MB/s.

**Serpent.** serpent-xts-plain64 encrypts at %s MB/s per core in the sector table (AVX2 kernels,
16 blocks bitsliced across ymm lanes, where the CPU has AVX2).

`, roundsText(), roundsText(),
		figure(r, "sector.scaling_median.aes-xts-plain64", "%.2f×"), figure(r, "sector.scaling_median.aes-cbc-essiv:sha256", "%.2f×"),
		figure(r, "sector.scaling_median.serpent-xts-plain64", "%.2f×"),
		figure(r, "xtskernel.aes256.enc4096", "%.2f×"), figure(r, "xtskernel.aes256.dec4096", "%.2f×"),
		percent(r, "xtskernel.limit_fraction.aes256.enc4096"), figure(r, "xtskernel.batch512", "%.2f×"),
		percent(r, "xtskernel.limit_fraction.batch512"),
		figure(r, "kernels.xts512", "%.2f×"), figure(r, "kernels.xts256", "%.2f×"),
		figure(r, "nbd.readfile.nbdkit-luks", "%.2f×"), figure(r, "nbd.readfile.qemu-nbd", "%.2f×"),
		figure(r, "reencrypt.size_mib", "%.0f"), figure(r, "reencrypt.mbs.blkcrypt.checksum", "%.0f"), figure(r, "reencrypt.mbs.blkcrypt.none", "%.0f"),
		figure(r, "reencrypt.mbs.cryptsetup.checksum", "%.0f"), figure(r, "reencrypt.mbs.cryptsetup.none", "%.0f"),
		figure(r, "reencrypt.mbs.readwrite", "%.0f"),
		serpentRange(r))
}

// limitNote warns when clockaes ran under load, which skews its clock.
func limitNote(r map[string]float64) string {
	if v, ok := r["aesunit.load"]; ok && v > maxLimitLoad {
		return fmt.Sprintf("; **not reliable in this run**: other processes used %.2f CPUs while clockaes ran", v)
	}
	return ""
}

// percent formats a measured fraction as a percentage, or says it is missing.
func percent(r map[string]float64, key string) string {
	v, ok := r[key]
	if !ok {
		return "(not measured)"
	}
	return fmt.Sprintf("%.0f%%", 100*v)
}

func roundsText() string {
	if n := max(1, *rounds); n > 1 {
		return fmt.Sprintf("%d alternating rounds", n)
	}
	return "one round"
}

func serpentRange(r map[string]float64) string {
	lo, ok1 := r["sector.serpent_mbs_min"]
	hi, ok2 := r["sector.serpent_mbs_max"]
	if !ok1 || !ok2 {
		return "(not measured)"
	}
	return fmt.Sprintf("%.0f–%.0f", lo, hi)
}

func loadRuns(dir string) []run {
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	var rs []run
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var r run
		if json.Unmarshal(b, &r) == nil && r.ID != "" {
			rs = append(rs, r)
		}
	}
	return rs
}

func saveRun(dir string, r run) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, r.ID+".json"), append(b, '\n'), 0o644)
}

// The README's figures live between these markers and are rewritten by
// every full run, so the README quotes only figures of a named run.
const (
	readmeBegin = "<!-- bench/all.sh figures: begin (generated, do not edit) -->"
	readmeEnd   = "<!-- bench/all.sh figures: end -->"
)

func readmeBlock(r run) string {
	res := r.Results
	return fmt.Sprintf(`%s
Single core, run %s of `+"`bench/all.sh`"+` (%s, %d cores, %s; every figure and its peers are
in BENCHMARKS.md under that run): AES-256-XTS at 4 KiB, one call per unit, is %s the Linux
kernel's best driver measured in the same run, and 256 sectors of 512 B in one call %s the
kernel's 512 B figure; dm-crypt-style CBC-ESSIV sector encryption is %s OpenSSL's serial CBC.
Through NBD, blkcrypt reads at %s and writes at %s nbdkit-luks; `+"`blkcrypt reencrypt`"+` runs at
%s `+"`cryptsetup reencrypt`"+` (checksum resilience).
%s`, readmeBegin, r.ID, r.CPU, r.Cores, r.Date,
		figure(res, "xtskernel.aes256.enc4096", "%.2f×"), figure(res, "xtskernel.batch512", "%.2f×"),
		figure(res, "kernels.essiv_enc", "%.2f×"),
		figure(res, "nbd.read.nbdkit-luks", "%.2f×"), figure(res, "nbd.write.nbdkit-luks", "%.2f×"),
		figure(res, "reencrypt.vs_cryptsetup.checksum", "%.2f×"), readmeEnd)
}

func updateReadme(path string, r run) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	i, j := strings.Index(s, readmeBegin), strings.Index(s, readmeEnd)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no figures block (%q … %q)", path, readmeBegin, readmeEnd)
	}
	s = s[:i] + readmeBlock(r) + s[j+len(readmeEnd):]
	return os.WriteFile(path, []byte(s), 0o644)
}
