package main

import (
	"fmt"
	"os"
	"strings"
)

// The Ceph RBD targets of issue #16: blkcrypt over qemu-nbd's raw rbd
// export against librbd's own LUKS2 encryption and the unencrypted export,
// on the same single-node cluster in the same run (bench/rbd.sh). They are
// appended here, not written into the table in full.go, so the RBD section
// lives in one file.
var rbdTargets = []target{
	{area: "rbd", what: "read/write ≥ 1.1× librbd's LUKS2 encryption (`encrypt.format=luks2`)",
		keys: []string{"rbd.read.librbd", "rbd.write.librbd"}, labels: []string{"read", "write"}, min: 1.1},
	{area: "rbd", what: "read/write ≥ 0.9× the unencrypted rbd export",
		keys: []string{"rbd.read.raw", "rbd.write.raw"}, labels: []string{"read", "write"}, min: 0.9},
	// The same two for the native device (package rbd, -tags ceph), and
	// how it compares with the qemu-nbd route: it is kept only if faster.
	{area: "rbd", what: "native (`-tags ceph`, librbd in the process): read/write ≥ 1.1× librbd's LUKS2",
		keys: []string{"rbd.native.read.librbd", "rbd.native.write.librbd"}, labels: []string{"read", "write"}, min: 1.1},
	{area: "rbd", what: "native: read/write ≥ 0.9× the unencrypted rbd export",
		keys: []string{"rbd.native.read.raw", "rbd.native.write.raw"}, labels: []string{"read", "write"}, min: 0.9},
	{area: "rbd", what: "native against the qemu-nbd route", keys: []string{"rbd.native.read.blkcrypt", "rbd.native.write.blkcrypt"},
		labels: []string{"read", "write"}, record: true},
}

func init() { targets = append(targets, rbdTargets...) }

// rbdSection writes the RBD section of BENCHMARKS.md: bench/rbd.sh on a
// 512 MiB image (32 MiB, one round, with -quick). A machine without Ceph
// gets the script's one-line reason, and its targets stay "not measured".
func rbdSection() {
	size, env := "512", []string(nil)
	if *quick {
		size, env = "32", []string{"ROUNDS=1"}
	}
	fmt.Fprintf(out, "## Ceph RBD: sequential write and read through nbdcopy (`bench/rbd.sh %s`)\n\n", size)
	s, err := script(env, "bench/rbd.sh", size)
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		s += "\n(the script failed: " + err.Error() + ")\n"
	}
	fmt.Fprint(out, strings.TrimRight(dropServing(s), "\n")+"\n\n")
	if _, ok := results["rbd.native.read.librbd"]; ok {
		fmt.Fprintf(out, "The native device (librbd in blkcrypt's process, one hop) read at %s and wrote at %s the qemu-nbd route in this run.\n\n",
			figure(results, "rbd.native.read.blkcrypt", "%.2f×"), figure(results, "rbd.native.write.blkcrypt", "%.2f×"))
	}
	if _, ok := results["rbd.read.librbd"]; ok {
		fmt.Fprintf(out, "blkcrypt's qemu-nbd route has two NBD hops (client → blkcrypt serve → qemu-nbd → librbd) where librbd's has one; "+
			"in this run it read at %s and wrote at %s librbd's LUKS2, and read at %s and wrote at %s the unencrypted export.\n\n",
			figure(results, "rbd.read.librbd", "%.2f×"), figure(results, "rbd.write.librbd", "%.2f×"),
			figure(results, "rbd.read.raw", "%.2f×"), figure(results, "rbd.write.raw", "%.2f×"))
	}
}
