// Command report measures blkcrypt against its peers on this machine in one
// run. Alone it prints the Markdown tables of the cipher, sector and engine
// section; with -full (what bench/all.sh runs) it also runs the NBD, LUKS
// and other-format benchmarks and writes the whole of BENCHMARKS.md: the
// header naming the run, the targets table with "met" computed from the
// measured ratios, the commentary and every section. Ratios, not absolute
// figures, are what carry over between runs on a shared machine.
//
//	go run ./bench/report [-sec 0.5] > /tmp/bench.md
//	go run ./bench/report -full -o BENCHMARKS.md -svg bench/throughput.svg
//	go run ./bench/report -full -quick -o /tmp/b.md   (3 minutes: checks the generator, figures meaningless)
//	XTS_PEERS_BUILD=/work/xtspeers go run ./bench/report -kernel-only   (issue #14's tables alone)
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt/capi"
	"github.com/blkcrypt/blkcrypt/sector"
)

var (
	sec    = flag.Float64("sec", 0.5, "seconds per measurement")
	svg    = flag.String("svg", "", "also run the block-size sweep and write its chart to this SVG file")
	onlySw = flag.Bool("sweep-only", false, "run only the block-size sweep")
	onlyPr = flag.Bool("probe-only", false, "run only the machine's scaling probe")
	onlySc = flag.Bool("scaling-only", false, "run only the engine's scaling table and the machine's scaling probe")
	onlyK  = flag.Bool("kernel-only", false, "run only issue #14's tables: XTS against the kernel and OpenSSL 4, CBC, fused ESSIV's five runs, Adiantum")
	rounds = flag.Int("rounds", 5, "alternating rounds per ratio (each side keeps its best)")
)

// out receives the tables; -full points it at a buffer so that the header
// and the targets, computed last, can come first in the file.
var out io.Writer = os.Stdout

// results holds every figure a target or the commentary refers to, by key
// (see targets in full.go); ratios are blkcrypt's speed over the peer's.
var results = map[string]float64{}

func record(key string, v float64) { results[key] = v }

// opensslSpeed returns OpenSSL's bytes per second for one cipher and size.
func opensslSpeed(cipher string, bytesPer int, decrypt bool) float64 {
	args := []string{"speed", "-evp", cipher, "-bytes", strconv.Itoa(bytesPer), "-seconds", strconv.Itoa(max(1, int(*sec+0.5))), "-mr"}
	if decrypt {
		args = append(args, "-decrypt")
	}
	out, err := exec.Command("openssl", args...).Output()
	if err != nil {
		fmt.Fprintf(os.Stderr, "openssl %v: %v\n", args, err)
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if f := strings.Split(sc.Text(), ":"); len(f) >= 4 && f[0] == "+F" {
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			return v
		}
	}
	return 0
}

func driverSpeed(name, driver string, keyLen, bs int, decrypt bool) float64 {
	return speedFor(name, driver, keyLen, bs, decrypt, time.Duration(*sec*float64(time.Second)))
}

// speedFor is capi's one-call-per-unit speed (what `blkcrypt speed` shows)
// of one driver in bytes per second, measured for d.
func speedFor(name, driver string, keyLen, bs int, decrypt bool, d time.Duration) float64 {
	a, err := capi.LookupDriver(name, driver)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 0
	}
	t, err := a.Skcipher(make([]byte, keyLen))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 0
	}
	r, err := capi.SpeedOne(t, bs, d, decrypt)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 0
	}
	return float64(r.OpsPerSec()) * float64(bs)
}

func capiDrivers(name string) ([]string, error) {
	ds, err := capi.Drivers(name)
	var names []string
	for _, d := range ds {
		names = append(names, d.Driver)
	}
	return names, err
}

// sectorSpeed measures sector.Cipher on a 64 KiB batch with one worker.
func sectorSpeed(spec string, keyLen, ss, workers int, batch int, decrypt bool) (float64, float64) {
	e := sector.NewEngine(workers)
	if workers > 1 {
		e.SetThreshold(1)
	}
	c, err := sector.New(spec, make([]byte, keyLen), sector.Options{SectorSize: ss, Engine: e})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 0, 0
	}
	buf := make([]byte, batch)
	r := testing.Benchmark(func(b *testing.B) {
		b.SetBytes(int64(len(buf)))
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if decrypt {
				c.DecryptSectors(buf, buf, 0)
			} else {
				c.EncryptSectors(buf, buf, 0)
			}
		}
	})
	return float64(r.Bytes) * float64(r.N) / r.T.Seconds(), float64(r.AllocsPerOp())
}

// sectorSpeedFor is one batch of batch bytes per call through sector.Cipher
// on one core (no engine workers), in bytes per second over about d; the
// second value is the calls made, so that a caller can tell a measurement
// too short to mean anything.
func sectorSpeedFor(spec string, keyLen, ss, batch int, decrypt bool, d time.Duration) (float64, int) {
	c, err := sector.New(spec, make([]byte, keyLen), sector.Options{SectorSize: ss, Engine: sector.NewEngine(1)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 0, 0
	}
	buf := make([]byte, batch)
	f := c.EncryptSectors
	if decrypt {
		f = c.DecryptSectors
	}
	f(buf, buf, 0) // warm up: key schedule, caches
	n, t0 := 0, time.Now()
	for time.Since(t0) < d {
		for range 16 {
			f(buf, buf, uint64(n))
			n++
		}
	}
	return float64(n) * float64(batch) / time.Since(t0).Seconds(), n
}

// bestPair measures ours and theirs in five alternating rounds and keeps
// each side's best: other tenants of this VM move single figures by tens
// of percent, and alternating gives both sides the same chances.
func bestPair(ours, theirs func() float64) (float64, float64) {
	var a, b float64
	for range max(1, *rounds) {
		a, b = max(a, ours()), max(b, theirs())
	}
	return a, b
}

func mb(v float64) string { return fmt.Sprintf("%.0f", v/1e6) }
func ratio(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "model name") {
			return strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
		}
	}
	return runtime.GOARCH
}

// scalingTable prints the engine's 2-core/1-core scaling on 1 MiB batches.
func scalingTable() {
	rounds := max(1, *rounds)
	fmt.Fprintf(out, "### sector: scaling on 1 MiB batches, 4096-byte sectors (%d workers vs 1)\n\n", runtime.GOMAXPROCS(0))
	fmt.Fprintln(out, "| spec | 1 worker MB/s | all cores MB/s | scaling (best vs best) | per-round scaling: min / median / max | allocs/op |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|")
	for _, sp := range []struct {
		spec string
		key  int
	}{{"aes-xts-plain64", 64}, {"aes-cbc-essiv:sha256", 32}, {"serpent-xts-plain64", 64}} {
		// Other tenants of this VM move single figures by tens of percent,
		// so each round measures both sides back to back, in alternating
		// order; the table gives each side's best and the spread of the
		// per-round ratios.
		var s1, s2, a float64
		var per []float64
		for i := range rounds {
			var v1, v2, al float64
			if i%2 == 0 {
				v1, _ = sectorSpeed(sp.spec, sp.key, 4096, 1, 1<<20, false)
				v2, al = sectorSpeed(sp.spec, sp.key, 4096, runtime.GOMAXPROCS(0), 1<<20, false)
			} else {
				v2, al = sectorSpeed(sp.spec, sp.key, 4096, runtime.GOMAXPROCS(0), 1<<20, false)
				v1, _ = sectorSpeed(sp.spec, sp.key, 4096, 1, 1<<20, false)
			}
			s1, s2, a = max(s1, v1), max(s2, v2), max(a, al)
			if v1 > 0 {
				per = append(per, v2/v1)
			}
		}
		sort.Float64s(per)
		spread := "n/a"
		if len(per) > 0 {
			spread = fmt.Sprintf("%.2f× / %.2f× / %.2f×", per[0], per[len(per)/2], per[len(per)-1])
		}
		fmt.Fprintf(out, "| %s | %s | %s | %s | %s | %.0f |\n", sp.spec, mb(s1), mb(s2), ratio(s2, s1), spread, a)
		if s1 > 0 {
			record("sector.scaling."+sp.spec, s2/s1)
		}
		if len(per) > 0 {
			record("sector.scaling_median."+sp.spec, per[len(per)/2])
		}
		record("sector.allocs", max(results["sector.allocs"], a))
	}
	fmt.Fprintf(out, "\n(%d rounds per spec.)\n\n", rounds)
}

func main() {
	flag.Parse()
	if *full {
		if err := runFull(); err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			os.Exit(1)
		}
		return
	}
	cipherTables()
}

// cipherTables writes the cipher, sector and engine section.
func cipherTables() {
	ov, _ := exec.Command("openssl", "version").Output()
	fmt.Fprintf(out, "Machine: %s, %d cores, %s; %s; %s.\n\n", cpuModel(), runtime.NumCPU(), runtime.Version(), strings.TrimSpace(string(ov)), time.Now().UTC().Format("2006-01-02"))

	if *onlyPr {
		scalingProbe()
		return
	}
	if *onlyK {
		kernelTable()
		fusedRuns()
		adiantumTable()
		return
	}
	if *onlySc {
		scalingTable()
		scalingProbe()
		return
	}
	if *svg != "" || *onlySw {
		fmt.Fprintln(out, "### Block-size sweep: blkcrypt, OpenSSL, x/crypto/xts and crypto/cipher, single core")
		fmt.Fprintln(out)
		ss := sweep()
		printSweep(out, ss)
		if *svg != "" {
			if err := writeSVG(*svg, ss); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
			fmt.Fprintf(out, "![throughput chart](%s)\n\n", *svg)
		}
		if *onlySw {
			return
		}
	}

	// 1. capi: fused ESSIV driver against the template instance at 16-byte
	// blocks, and the essiv drivers against openssl aes-256-cbc.
	fmt.Fprintln(out, "### capi: essiv(cbc(aes),sha256), 256-bit key, single core (blkcrypt speed, MB/s)")
	fmt.Fprintln(out)
	ds, _ := capi.Drivers("essiv(cbc(aes),sha256)")
	sizes := []int{16, 64, 256, 1024, 1472, 4096, 8192}
	fmt.Fprint(out, "| driver | prio |")
	for _, s := range sizes {
		fmt.Fprintf(out, " %d B |", s)
	}
	fmt.Fprintln(out)
	fmt.Fprint(out, "|---|---|")
	for range sizes {
		fmt.Fprint(out, "---|")
	}
	fmt.Fprintln(out)
	res := map[string][]float64{}
	for _, d := range ds {
		if d.SelfTest() != nil || strings.Contains(d.Driver, "stdlib") {
			continue
		}
		fmt.Fprintf(out, "| %s | %d |", d.Driver, d.Priority)
		for _, s := range sizes {
			v := driverSpeed(d.Name, d.Driver, 32, s, false)
			res[d.Driver] = append(res[d.Driver], v)
			fmt.Fprintf(out, " %s |", mb(v))
		}
		fmt.Fprintln(out)
	}
	fmt.Fprint(out, "| openssl aes-256-cbc (no ESSIV) | – |")
	ossl := map[int]float64{}
	for _, s := range sizes {
		ossl[s] = opensslSpeed("aes-256-cbc", s, false)
		fmt.Fprintf(out, " %s |", mb(ossl[s]))
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out)
	for _, impl := range []string{"aesni", "vaes", "vaes-avx512"} {
		f, t := res["essiv-cbc-aes-sha256-"+impl], res["essiv(cbc-aes-"+impl+",aes-aesni,sha256-generic)"]
		if len(f) > 0 && len(t) > 0 {
			if t[0] > 0 {
				record("capi.fused."+impl, f[0]/t[0])
			}
			fmt.Fprintf(out, "Fused `essiv-cbc-aes-sha256-%s` vs template instance `essiv(cbc-aes-%s,aes-aesni,sha256-generic)` at 16-byte blocks: **%s** (target ≥ 1.5×).\n\n", impl, impl, ratio(f[0], t[0]))
		}
	}

	// Issue #14: against the kernel's own code, fused ESSIV's five runs,
	// Adiantum.
	t0 := time.Now()
	kernelTable()
	fusedRuns()
	adiantumTable()
	took("issue #14's tables", t0)

	// 2. kernels vs OpenSSL 3.0 (#14 replaced these targets by the kernel's;
	// the ratios stay recorded).
	fmt.Fprintln(out, "### Single-core kernels against OpenSSL (MB/s, same run)")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| what | blkcrypt | openssl | ratio | target |")
	fmt.Fprintln(out, "|---|---|---|---|---|")
	x512, o512 := bestPair(func() float64 { return driverSpeed("xts(aes)", capiBest("xts(aes)"), 64, 4096, false) },
		func() float64 { return opensslSpeed("aes-256-xts", 4096, false) })
	fmt.Fprintf(out, "| xts(aes) 512-bit key, 4096 B (%s) vs aes-256-xts | %s | %s | %s | recorded (#14: the kernel's table) |\n", capiBest("xts(aes)"), mb(x512), mb(o512), ratio(x512, o512))
	x256, o256 := bestPair(func() float64 { return driverSpeed("xts(aes)", capiBest("xts(aes)"), 32, 4096, false) },
		func() float64 { return opensslSpeed("aes-128-xts", 4096, false) })
	fmt.Fprintf(out, "| xts(aes) 256-bit key, 4096 B vs aes-128-xts | %s | %s | %s | recorded (#14: the kernel's table) |\n", mb(x256), mb(o256), ratio(x256, o256))
	es, oc := bestPair(func() float64 { v, _ := sectorSpeed("aes-cbc-essiv:sha256", 32, 512, 1, 64<<10, false); return v },
		func() float64 { return opensslSpeed("aes-256-cbc", 512, false) })
	fmt.Fprintf(out, "| aes-cbc-essiv:sha256 sectors (512 B, 64 KiB batches) vs aes-256-cbc encrypt 512 B | %s | %s | %s | ≥ 5× |\n", mb(es), mb(oc), ratio(es, oc))
	cd, od := bestPair(func() float64 { v, _ := sectorSpeed("aes-cbc-essiv:sha256", 32, 512, 1, 64<<10, true); return v },
		func() float64 { return opensslSpeed("aes-256-cbc", 512, true) })
	fmt.Fprintf(out, "| aes-cbc-essiv:sha256 sector decrypt vs aes-256-cbc decrypt 512 B | %s | %s | %s | ≥ 1.2× |\n", mb(cd), mb(od), ratio(cd, od))
	one, ox := bestPair(func() float64 { v, _ := sectorSpeed("aes-xts-plain64", 64, 512, 1, 512, false); return v },
		func() float64 { return opensslSpeed("aes-256-xts", 512, false) })
	for k, v := range map[string][2]float64{"xts512": {x512, o512}, "xts256": {x256, o256}, "essiv_enc": {es, oc}, "cbc_dec": {cd, od}, "one_sector": {one, ox}} {
		if v[1] > 0 {
			record("kernels."+k, v[0]/v[1])
		}
	}
	fmt.Fprintf(out, "| one 512 B sector through sector.Cipher (aes-xts-plain64) vs aes-256-xts 512 B | %s | %s | %s | ≥ 1.0× |\n\n", mb(one), mb(ox), ratio(one, ox))

	// 3. sector layer.
	fmt.Fprintln(out, "### sector: throughput by sector size (one core, 64 KiB batches, MB/s, allocs/op)")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| spec | 512 | 1024 | 2048 | 4096 |")
	fmt.Fprintln(out, "|---|---|---|---|---|")
	for _, sp := range []struct {
		spec string
		key  int
	}{{"aes-xts-plain64", 64}, {"aes-cbc-essiv:sha256", 32}, {"serpent-xts-plain64", 64}, {"twofish-cbc-essiv:sha256", 32}} {
		for _, dec := range []bool{false, true} {
			dir := "enc"
			if dec {
				dir = "dec"
			}
			fmt.Fprintf(out, "| %s %s |", sp.spec, dir)
			for _, ss := range []int{512, 1024, 2048, 4096} {
				v, a := sectorSpeed(sp.spec, sp.key, ss, 1, 64<<10, dec)
				fmt.Fprintf(out, " %s (%.0f) |", mb(v), a)
				record("sector.allocs", max(results["sector.allocs"], a))
				if sp.spec == "serpent-xts-plain64" && !dec {
					record("sector.serpent_mbs_min", minNonZero(results["sector.serpent_mbs_min"], v/1e6))
					record("sector.serpent_mbs_max", max(results["sector.serpent_mbs_max"], v/1e6))
				}
			}
			fmt.Fprintln(out)
		}
	}
	fmt.Fprintln(out)
	scalingTable()
	scalingProbe()
	fmt.Fprintln(out, "### sector: measured inline/parallel break-even (512-byte sectors)")
	fmt.Fprintln(out)
	fmt.Fprintln(out, "| spec | driver | break-even |")
	fmt.Fprintln(out, "|---|---|---|")
	for _, sp := range []struct {
		spec string
		key  int
	}{{"aes-xts-plain64", 64}, {"aes-cbc-essiv:sha256", 32}, {"serpent-xts-plain64", 64}, {"twofish-cbc-essiv:sha256", 32}} {
		e := sector.NewEngine(runtime.GOMAXPROCS(0))
		c, _ := sector.New(sp.spec, make([]byte, sp.key), sector.Options{Engine: e})
		th := e.Measure(c)
		s := "never (inline always wins)"
		if th > 0 {
			s = fmt.Sprintf("%d bytes", th)
		}
		fmt.Fprintf(out, "| %s | %s | %s |\n", sp.spec, c.Driver(), s)
	}
}

func minNonZero(a, b float64) float64 {
	if a == 0 || b < a {
		return b
	}
	return a
}

func capiBest(name string) string {
	a, err := capi.Lookup(name)
	if err != nil {
		return ""
	}
	return a.Driver
}
