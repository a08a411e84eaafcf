package partition

import (
	"errors"
	"strings"
	"testing"
)

func TestFindGPT(t *testing.T) {
	img := newImage(t, "find.img", 64<<20)
	run(t, "", sgdisk(t), gptLayout(img)...)
	tb := mustRead(t, img, Options{})
	p1 := "0B5E1A1D-1111-4222-8333-944455566677" // set by gptLayout
	for sel, want := range map[string]int{
		"3":                               3,
		"128":                             128,
		"PARTUUID=" + p1:                  1,
		"partuuid=" + strings.ToLower(p1): 1,
		p1:                                1,
		"{" + p1 + "}":                    1,
		"PARTLABEL=boot":                  2,
		"boot":                            2,
		"cryptroot":                       3,
		"Données ✓ 🔑":                     5,
		"PARTLABEL=abcdefghijklmnopqrstuvwxyz0123456789": 6,
		"PARTUUID=" + tb.Partitions[5].UUID.String():     128,
	} {
		p, err := tb.Find(sel)
		if err != nil || p.Number != want {
			t.Errorf("Find(%q) = %d, %v; want %d", sel, p.Number, err, want)
		}
	}
	for sel, want := range map[string]error{
		"4":              ErrNotFound,
		"0":              ErrNotFound,
		"129":            ErrNotFound,
		"99999999999999": ErrNotFound,
		"":               ErrInvalid,
		"Boot":           ErrNotFound,
		"PARTLABEL=":     ErrNotFound,
		"PARTUUID=0B5E1A1D-1111-4222-8333-944455566678": ErrNotFound,
		"0B5E1A1D-1111-4222-8333-944455566678":          ErrNotFound,
	} {
		_, err := tb.Find(sel)
		oneLine(t, err, want)
	}
}

func TestFindAmbiguousLabel(t *testing.T) {
	img := newImage(t, "dup.img", 8<<20)
	run(t, "", sgdisk(t), "-o", "-n", "1:0:+1M", "-c", "1:data", "-n", "2:0:+1M", "-c", "2:data", img)
	tb := mustRead(t, img, Options{})
	_, err := tb.Find("data")
	oneLine(t, err, ErrAmbiguous)
	if !strings.Contains(err.Error(), "partitions 1, 2") {
		t.Errorf("error %q does not name the partitions", err)
	}
	if p, err := tb.Find("2"); err != nil || p.Name != "data" {
		t.Errorf("Find(2): %+v, %v", p, err)
	}
}

func TestFindMBR(t *testing.T) {
	img := newImage(t, "mbr.img", 32<<20)
	makeMBR(t, img)
	tb := mustRead(t, img, Options{})
	for sel, want := range map[string]int{
		"5":                    5,
		"1":                    1,
		"PARTUUID=1a2b3c4d-05": 5,
		"PARTUUID=1A2B3C4D-07": 7,
		"1a2b3c4d-06":          6,
	} {
		p, err := tb.Find(sel)
		if err != nil || p.Number != want {
			t.Errorf("Find(%q) = %d, %v; want %d", sel, p.Number, err, want)
		}
	}
	for _, sel := range []string{"8", "PARTLABEL=x", "x", "PARTUUID=1a2b3c4d-08", "1a2b3c4e-05"} {
		_, err := tb.Find(sel)
		oneLine(t, err, ErrNotFound)
	}
	if _, err := tb.Find("3"); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Open(nil, "3", DeviceOptions{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Open with a nil disk: %v", err)
	}
}
