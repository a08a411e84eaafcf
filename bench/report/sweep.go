package main

import (
	"crypto/aes"
	"crypto/cipher"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"golang.org/x/crypto/xts"
)

// sweepSizes are the request sizes of the block-size sweep.
var sweepSizes = []int{16, 64, 256, 512, 1024, 4096, 8192, 65536}

type series struct {
	name string
	mbps []float64
}

func goBench(f func(b []byte)) func(bs int) float64 {
	return func(bs int) float64 {
		buf := make([]byte, bs)
		r := testing.Benchmark(func(b *testing.B) {
			b.SetBytes(int64(bs))
			for i := 0; i < b.N; i++ {
				f(buf)
			}
		})
		return float64(r.Bytes) * float64(r.N) / r.T.Seconds()
	}
}

// sweep measures every series at every size, one after another in this
// process, so the ratios come from one run.
func sweep() []series {
	key := make([]byte, 64)
	xc, _ := xts.NewCipher(aes.NewCipher, key)
	blk, _ := aes.NewCipher(key[:32])
	iv := make([]byte, 16)
	type src struct {
		name string
		f    func(bs int) float64
	}
	srcs := []src{
		{"blkcrypt xts(aes) 512-bit", func(bs int) float64 { return driverSpeed("xts(aes)", capiBest("xts(aes)"), 64, max(bs, 16), false) }},
		{"openssl aes-256-xts", func(bs int) float64 { return opensslSpeed("aes-256-xts", bs, false) }},
		{"x/crypto/xts aes-256", goBench(func(b []byte) { xc.Encrypt(b, b, 0) })},
		{"blkcrypt essiv(cbc(aes),sha256) enc 256-bit", func(bs int) float64 {
			return driverSpeed("essiv(cbc(aes),sha256)", capiBest("essiv(cbc(aes),sha256)"), 32, bs, false)
		}},
		{"openssl aes-256-cbc enc", func(bs int) float64 { return opensslSpeed("aes-256-cbc", bs, false) }},
		{"crypto/cipher CBC enc aes-256", goBench(func(b []byte) { cipher.NewCBCEncrypter(blk, iv).CryptBlocks(b, b) })},
		{"blkcrypt cbc(aes) dec 256-bit", func(bs int) float64 { return driverSpeed("cbc(aes)", capiBest("cbc(aes)"), 32, bs, true) }},
		{"openssl aes-256-cbc dec", func(bs int) float64 { return opensslSpeed("aes-256-cbc", bs, true) }},
		{"crypto/cipher CBC dec aes-256", goBench(func(b []byte) { cipher.NewCBCDecrypter(blk, iv).CryptBlocks(b, b) })},
	}
	var out []series
	for _, s := range srcs {
		se := series{name: s.name}
		for _, bs := range sweepSizes {
			se.mbps = append(se.mbps, s.f(bs)/1e6)
		}
		out = append(out, se)
	}
	return out
}

func printSweep(w io.Writer, ss []series) {
	fmt.Fprintf(w, "| MB/s, single core | %s |\n|---|%s\n", strings.Join(intsToStrings(sweepSizes), " | "), strings.Repeat("---|", len(sweepSizes)))
	for _, s := range ss {
		fmt.Fprintf(w, "| %s |", s.name)
		for _, v := range s.mbps {
			fmt.Fprintf(w, " %.0f |", v)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}

func intsToStrings(v []int) []string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%d B", x)
	}
	return s
}

// writeSVG draws MB/s against block size (log x axis) as a line chart.
func writeSVG(path string, ss []series) error {
	const W, H, L, R, T, B = 900, 520, 70, 330, 30, 50
	maxV := 1.0
	for _, s := range ss {
		for _, v := range s.mbps {
			maxV = max(maxV, v)
		}
	}
	x := func(i int) float64 { return L + float64(i)*(W-L-R)/float64(len(sweepSizes)-1) }
	y := func(v float64) float64 { return H - B - v/maxV*(H-T-B) }
	colors := []string{"#d62728", "#1f77b4", "#7f7f7f", "#ff7f0e", "#17becf", "#bcbd22", "#2ca02c", "#9467bd", "#8c564b"}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", W, H)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%d" y="18" font-size="14">Single-core throughput (MB/s) against request size, one run on this machine</text>`+"\n", L)
	for i, bs := range sweepSizes {
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%d" x2="%.0f" y2="%d" stroke="#eee"/><text x="%.0f" y="%d" text-anchor="middle">%d</text>`+"\n", x(i), T, x(i), H-B, x(i), H-B+18, bs)
	}
	for k := 0; k <= 5; k++ {
		v := maxV * float64(k) / 5
		fmt.Fprintf(&b, `<line x1="%d" y1="%.0f" x2="%d" y2="%.0f" stroke="#eee"/><text x="%d" y="%.0f" text-anchor="end">%.0f</text>`+"\n", L, y(v), W-R, y(v), L-6, y(v)+4, v)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">request size (bytes)</text>`+"\n", (L+W-R)/2, H-12)
	for i, s := range ss {
		c := colors[i%len(colors)]
		var pts []string
		for j, v := range s.mbps {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(j), y(v)))
		}
		dash := ""
		if strings.HasPrefix(s.name, "openssl") {
			dash = ` stroke-dasharray="6,3"`
		} else if !strings.HasPrefix(s.name, "blkcrypt") {
			dash = ` stroke-dasharray="2,3"`
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", c, dash, strings.Join(pts, " "))
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/><text x="%d" y="%d">%s</text>`+"\n",
			W-R+15, T+20+i*22, W-R+40, T+20+i*22, c, dash, W-R+46, T+24+i*22, s.name)
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
