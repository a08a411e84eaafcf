package cli

import (
	"fmt"
	"io"
	"time"
)

// progressMin is the smallest job that shows progress unasked: below it
// the work is over before a line would help.
const progressMin = 64 << 20

// progress prints cryptsetup 2.6's progress lines for one long job (to
// stderr: read's stdout carries the data). On a terminal it is one line,
// rewritten every half second; --progress-frequency N prints a line every
// N seconds instead, terminal or not; --progress-json prints cryptsetup's
// JSON objects, one a line. -q/--batch-mode prints none, as in cryptsetup.
type progress struct {
	w            io.Writer
	device, verb string // verb: "written" or "read"
	total        int64
	freq         time.Duration
	lines, json  bool // lines: a line per report, no terminal rewrite
	now          func() time.Time
	start, last  time.Time
	done         int64
}

// progressFlags are cryptsetup's progress options.
type progressFlags struct {
	ProgressFrequency int64 `flag:"progress-frequency" help:"print a progress line every N seconds, also when stderr is no terminal" def:"0 (a refreshed line, on a terminal only)"`
	ProgressJSON      bool  `flag:"progress-json" help:"print progress as JSON lines, as cryptsetup 2.6 does"`
}

// start returns the progress of one job, or nil when nothing is to be
// shown (batch: -q).
func (f progressFlags) start(env *Env, batch bool, device, verb string, total int64) *progress {
	if batch || total <= 0 {
		return nil
	}
	pr := &progress{w: env.Stderr, device: device, verb: verb, total: total, freq: 500 * time.Millisecond, now: time.Now}
	if env.Now != nil {
		pr.now = env.Now
	}
	pr.json = f.ProgressJSON
	if f.ProgressFrequency > 0 {
		pr.freq, pr.lines = time.Duration(f.ProgressFrequency)*time.Second, true
	}
	if !pr.json && !pr.lines && (!env.StderrIsTerminal || total <= progressMin) {
		return nil
	}
	pr.start = pr.now()
	pr.last = pr.start
	return pr
}

// add reports n more bytes done.
func (pr *progress) add(n int64) {
	if pr == nil {
		return
	}
	pr.done += n
	if t := pr.now(); t.Sub(pr.last) >= pr.freq && pr.done < pr.total {
		pr.last = t
		pr.print(t, false)
	}
}

// finish prints the last line (when the job ended whole).
func (pr *progress) finish() {
	if pr == nil {
		return
	}
	pr.print(pr.now(), true)
}

func (pr *progress) print(t time.Time, final bool) {
	el := t.Sub(pr.start)
	secs := el.Seconds()
	speed := 0.0
	if secs > 0 {
		speed = float64(pr.done) / secs
	}
	eta := time.Duration(0)
	if speed > 0 && !final {
		eta = time.Duration(float64(pr.total-pr.done) / speed * float64(time.Second))
	}
	if pr.json {
		fmt.Fprintf(pr.w, "{\"device\":%q,\"device_bytes\":\"%d\",\"device_size\":\"%d\",\"speed\":\"%d\",\"eta_ms\":\"%d\",\"time_ms\":\"%d\"}\n",
			pr.device, pr.done, pr.total, uint64(speed), eta.Milliseconds(), el.Milliseconds())
		return
	}
	cl := "\x1b[2K\r"
	if pr.lines {
		cl = ""
	}
	if final {
		fmt.Fprintf(pr.w, "%sFinished, time %s, %4d MiB %s, speed %s\n", cl, clock(el), pr.done>>20, pr.verb, speedStr(speed))
		return
	}
	eol := ""
	if pr.lines {
		eol = "\n"
	}
	fmt.Fprintf(pr.w, "%sProgress: %5.1f%%, ETA %s, %4d MiB %s, speed %s%s", cl,
		float64(pr.done)/float64(pr.total)*100, clock(eta), pr.done>>20, pr.verb, speedStr(speed), eol)
}

// clock prints a duration as cryptsetup 2.6.1 prints ETA and time:
// 01m05s (and 1h01m05s past an hour).
func clock(d time.Duration) string {
	s := int64(d / time.Second)
	if s >= 3600 {
		return fmt.Sprintf("%dh%02dm%02ds", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%02dm%02ds", s/60, s%60)
}

// speedStr prints bytes per second with cryptsetup's binary units.
func speedStr(bps float64) string {
	unit := ""
	switch {
	case bps > 1<<30:
		bps, unit = bps/(1<<30), "Gi"
	case bps > 1<<20:
		bps, unit = bps/(1<<20), "Mi"
	case bps > 1<<10:
		bps, unit = bps/(1<<10), "Ki"
	}
	return fmt.Sprintf("%5.1f %sB/s", bps, unit)
}

// progressReader counts what passes through it.
type progressReader struct {
	r  io.Reader
	pr *progress
}

func (r progressReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	r.pr.add(int64(n))
	return n, err
}

// withProgress wraps r when pr shows anything.
func withProgress(r io.Reader, pr *progress) io.Reader {
	if pr == nil {
		return r
	}
	return progressReader{r, pr}
}
