package main

import "testing"

// TestRBDTargets: the RBD targets are in the table once each, judged on
// both read and write, and a run without Ceph leaves them "not measured".
func TestRBDTargets(t *testing.T) {
	n := 0
	for _, tg := range targets {
		if tg.area == "rbd" {
			n++
		}
	}
	if n != len(rbdTargets) {
		t.Fatalf("%d rbd rows in the targets table, want %d", n, len(rbdTargets))
	}
	for _, c := range []struct {
		r         map[string]float64
		cell, met string
	}{
		{map[string]float64{"rbd.read.librbd": 1.2, "rbd.write.librbd": 1.05}, "1.20× (read), 1.05× (write)", "no"},
		{map[string]float64{"rbd.read.librbd": 1.2, "rbd.write.librbd": 1.1}, "1.20× (read), 1.10× (write)", "yes"},
		{nil, "– (read), – (write)", "not measured"},
	} {
		if cell, met := rbdTargets[0].verdict(c.r); cell != c.cell || met != c.met {
			t.Errorf("%v: %q %q, want %q %q", c.r, cell, met, c.cell, c.met)
		}
	}
}
