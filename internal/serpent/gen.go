//go:build ignore

// gen.go writes sbox.go: bitsliced boolean formulas for the eight Serpent
// S-boxes and their inverses, and the fully inlined block functions that
// use them.
//
// The S-box tables are the ones given in the Serpent specification
// (Anderson, Biham, Knudsen: "Serpent: A Proposal for the Advanced
// Encryption Standard", section 2 / appendix). For each S-box a small
// straight-line circuit of AND/OR/XOR/ANDNOT/NOT gates over 32-bit words is
// found by a seeded randomised search over Shannon/Davio decompositions with
// sharing of already computed sub-functions; the smallest circuit found is
// emitted. Every circuit is checked against its table before it is written.
//
// Run with: go run gen.go (from this directory).
package main

import (
	"bytes"
	"fmt"
	"go/format"
	"math/rand"
	"os"
	"strings"
)

// sboxes are S0..S7 from the Serpent specification. Input nibble bit k is
// bit i of word x_k (bitslice mode), likewise for the output.
var sboxes = [8][16]uint8{
	{3, 8, 15, 1, 10, 6, 5, 11, 14, 13, 4, 2, 7, 0, 9, 12},
	{15, 12, 2, 7, 9, 0, 5, 10, 1, 11, 14, 8, 6, 13, 3, 4},
	{8, 6, 7, 9, 3, 12, 10, 15, 13, 1, 14, 4, 0, 11, 5, 2},
	{0, 15, 11, 8, 12, 9, 6, 3, 13, 1, 2, 4, 10, 7, 5, 14},
	{1, 15, 8, 3, 12, 0, 11, 6, 2, 5, 4, 10, 9, 14, 7, 13},
	{15, 5, 2, 11, 4, 10, 9, 12, 0, 3, 14, 8, 13, 6, 7, 1},
	{7, 2, 12, 5, 8, 4, 6, 11, 14, 9, 1, 15, 13, 3, 10, 0},
	{1, 13, 15, 0, 14, 8, 2, 11, 7, 4, 12, 10, 9, 3, 5, 6},
}

const (
	opIn = iota
	opConst
	opXor
	opAnd
	opOr
	opAndNot
	opNot
)

type node struct {
	op   int
	a, b int
	tt   uint16
}

type circuit struct {
	nodes []node
	known map[uint16]int
	rng   *rand.Rand
	gates int
}

var inputTT = [4]uint16{0xaaaa, 0xcccc, 0xf0f0, 0xff00}

func newCircuit(rng *rand.Rand) *circuit {
	c := &circuit{known: map[uint16]int{}, rng: rng}
	for i := 0; i < 4; i++ {
		c.add(node{op: opIn, a: i, tt: inputTT[i]})
	}
	c.add(node{op: opConst, a: 0, tt: 0})
	c.add(node{op: opConst, a: 1, tt: 0xffff})
	return c
}

func (c *circuit) add(n node) int {
	if id, ok := c.known[n.tt]; ok {
		return id
	}
	c.nodes = append(c.nodes, n)
	id := len(c.nodes) - 1
	c.known[n.tt] = id
	switch n.op {
	case opIn, opConst:
	case opAndNot:
		// a &^ b needs a NOT and an AND on amd64 without BMI1.
		c.gates += 2
	default:
		c.gates++
	}
	return id
}

func (c *circuit) mk(op, a, b int) int {
	ta, tb := c.nodes[a].tt, c.nodes[b].tt
	var t uint16
	switch op {
	case opXor:
		t = ta ^ tb
	case opAnd:
		t = ta & tb
	case opOr:
		t = ta | tb
	case opAndNot:
		t = ta &^ tb
	case opNot:
		t = ^ta
	}
	if id, ok := c.known[t]; ok {
		return id
	}
	// Constant simplifications.
	if op == opXor && (ta == 0xffff || tb == 0xffff) {
		if ta == 0xffff {
			a = b
		}
		return c.add(node{op: opNot, a: a, tt: t})
	}
	if op == opAndNot && ta == 0xffff {
		return c.add(node{op: opNot, a: b, tt: t})
	}
	return c.add(node{op: op, a: a, b: b, tt: t})
}

func cofactors(f uint16, v int) (f0, f1 uint16) {
	bit := 1 << v
	for x := 0; x < 16; x++ {
		if f>>(x&^bit)&1 != 0 {
			f0 |= 1 << x
		}
		if f>>(x|bit)&1 != 0 {
			f1 |= 1 << x
		}
	}
	return
}

// build returns a node computing f, adding gates as needed.
func (c *circuit) build(f uint16, depth int) int {
	if id, ok := c.known[f]; ok {
		return id
	}
	if id, ok := c.known[^f]; ok {
		return c.mk(opNot, id, id)
	}
	// One gate over known functions?
	ids := make([]int, 0, len(c.nodes))
	for _, id := range c.known {
		ids = append(ids, id)
	}
	// Deterministic order for reproducibility.
	for i := range ids {
		for j := i + 1; j < len(ids); j++ {
			if ids[j] < ids[i] {
				ids[i], ids[j] = ids[j], ids[i]
			}
		}
	}
	for _, a := range ids {
		for _, b := range ids {
			ta, tb := c.nodes[a].tt, c.nodes[b].tt
			switch f {
			case ta ^ tb:
				return c.mk(opXor, a, b)
			case ta & tb:
				return c.mk(opAnd, a, b)
			case ta | tb:
				return c.mk(opOr, a, b)
			case ta &^ tb:
				return c.mk(opAndNot, a, b)
			}
		}
	}
	// Decompose.
	var vars []int
	for v := 0; v < 4; v++ {
		if f0, f1 := cofactors(f, v); f0 != f1 {
			vars = append(vars, v)
		}
	}
	v := vars[c.rng.Intn(len(vars))]
	x := v // node id of input v
	f0, f1 := cofactors(f, v)
	d := f0 ^ f1
	choice := c.rng.Intn(5)
	if choice == 3 && depth > 6 {
		choice = 0
	}
	switch choice {
	case 0: // positive Davio: f = f0 ^ (x & d)
		g := c.build(f0, depth+1)
		h := c.build(d, depth+1)
		return c.mk(opXor, g, c.mk(opAnd, h, x))
	case 1: // negative Davio: f = f1 ^ (d &^ x)
		g := c.build(f1, depth+1)
		h := c.build(d, depth+1)
		return c.mk(opXor, g, c.mk(opAndNot, h, x))
	case 2: // Shannon: f = (f1 & x) | (f0 &^ x)
		g := c.build(f1, depth+1)
		h := c.build(f0, depth+1)
		return c.mk(opOr, c.mk(opAnd, g, x), c.mk(opAndNot, h, x))
	case 3: // f = g ^ h with g an already known function
		ids := make([]int, 0)
		for id := range c.nodes {
			if c.nodes[id].op != opConst {
				ids = append(ids, id)
			}
		}
		g := ids[c.rng.Intn(len(ids))]
		h := c.build(f^c.nodes[g].tt, depth+1)
		return c.mk(opXor, g, h)
	default: // f = (f1 & x) ^ (f0 &^ x) with one side possibly simpler
		g := c.build(f1, depth+1)
		h := c.build(f0, depth+1)
		return c.mk(opXor, c.mk(opAnd, g, x), c.mk(opAndNot, h, x))
	}
}

func outputsTT(s [16]uint8) [4]uint16 {
	var o [4]uint16
	for x := 0; x < 16; x++ {
		for k := 0; k < 4; k++ {
			if s[x]>>k&1 != 0 {
				o[k] |= 1 << x
			}
		}
	}
	return o
}

type result struct {
	c    *circuit
	outs [4]int
}

func synth(s [16]uint8, seed int64, trials int) result {
	rng := rand.New(rand.NewSource(seed))
	target := outputsTT(s)
	var best result
	for t := 0; t < trials; t++ {
		c := newCircuit(rng)
		order := rng.Perm(4)
		var outs [4]int
		for _, k := range order {
			outs[k] = c.build(target[k], 0)
		}
		// Outputs must be real gates or inputs; a constant cannot occur.
		if best.c == nil || c.gates < best.c.gates {
			best = result{c: c, outs: outs}
		}
	}
	// Verify.
	for k := 0; k < 4; k++ {
		if best.c.nodes[best.outs[k]].tt != target[k] {
			panic("circuit mismatch")
		}
	}
	return best
}

// emit writes statements computing the circuit from in[0..3] and assigning
// to out[0..3]. Temporaries are named prefix+N.
func emit(w *bytes.Buffer, r result, in, out [4]string, prefix string) {
	name := func(id int) string {
		n := r.c.nodes[id]
		switch n.op {
		case opIn:
			return in[n.a]
		case opConst:
			if n.a == 0 {
				return "0"
			}
			return "^uint32(0)"
		}
		return fmt.Sprintf("%s%d", prefix, id)
	}
	// Only emit nodes reachable from outputs.
	used := make([]bool, len(r.c.nodes))
	var mark func(int)
	mark = func(id int) {
		if used[id] {
			return
		}
		used[id] = true
		n := r.c.nodes[id]
		switch n.op {
		case opXor, opAnd, opOr, opAndNot:
			mark(n.a)
			mark(n.b)
		case opNot:
			mark(n.a)
		}
	}
	for _, o := range r.outs {
		mark(o)
	}
	for id, n := range r.c.nodes {
		if !used[id] {
			continue
		}
		var e string
		switch n.op {
		case opIn, opConst:
			continue
		case opXor:
			e = name(n.a) + " ^ " + name(n.b)
		case opAnd:
			e = name(n.a) + " & " + name(n.b)
		case opOr:
			e = name(n.a) + " | " + name(n.b)
		case opAndNot:
			e = name(n.a) + " &^ " + name(n.b)
		case opNot:
			e = "^" + name(n.a)
		}
		fmt.Fprintf(w, "%s%d := %s\n", prefix, id, e)
	}
	fmt.Fprintf(w, "%s, %s, %s, %s = %s, %s, %s, %s\n", out[0], out[1], out[2], out[3],
		name(r.outs[0]), name(r.outs[1]), name(r.outs[2]), name(r.outs[3]))
}

func countUsed(r result) int {
	var b bytes.Buffer
	emit(&b, r, [4]string{"a", "b", "c", "d"}, [4]string{"a", "b", "c", "d"}, "t")
	return strings.Count(b.String(), ":=")
}

func inverse(s [16]uint8) [16]uint8 {
	var inv [16]uint8
	for i, v := range s {
		inv[v] = uint8(i)
	}
	return inv
}

func main() {
	const trials = 20000
	var fwd, inv [8]result
	total := 0
	for i := 0; i < 8; i++ {
		fwd[i] = synth(sboxes[i], int64(1000+i), trials)
		inv[i] = synth(inverse(sboxes[i]), int64(2000+i), trials)
		total += countUsed(fwd[i]) + countUsed(inv[i])
		fmt.Fprintf(os.Stderr, "S%d: %d gates, S%d^-1: %d gates\n", i, countUsed(fwd[i]), i, countUsed(inv[i]))
	}
	fmt.Fprintf(os.Stderr, "total %d gates\n", total)

	x := [4]string{"x0", "x1", "x2", "x3"}
	var w bytes.Buffer
	w.WriteString("// Code generated by gen.go; DO NOT EDIT.\n\n")
	w.WriteString("package serpent\n\n")
	w.WriteString("import \"math/bits\"\n\n")

	// Stand-alone S-box functions (key schedule and tests).
	for i := 0; i < 8; i++ {
		fmt.Fprintf(&w, "// sb%d applies S-box S%d in bitslice mode.\n", i, i)
		fmt.Fprintf(&w, "func sb%d(x0, x1, x2, x3 uint32) (uint32, uint32, uint32, uint32) {\n", i)
		emit(&w, fwd[i], x, x, "t")
		w.WriteString("return x0, x1, x2, x3\n}\n\n")
		fmt.Fprintf(&w, "// isb%d applies the inverse of S-box S%d in bitslice mode.\n", i, i)
		fmt.Fprintf(&w, "func isb%d(x0, x1, x2, x3 uint32) (uint32, uint32, uint32, uint32) {\n", i)
		emit(&w, inv[i], x, x, "t")
		w.WriteString("return x0, x1, x2, x3\n}\n\n")
	}

	lt := `x0 = bits.RotateLeft32(x0, 13)
x2 = bits.RotateLeft32(x2, 3)
x1 ^= x0 ^ x2
x3 ^= x2 ^ x0<<3
x1 = bits.RotateLeft32(x1, 1)
x3 = bits.RotateLeft32(x3, 7)
x0 ^= x1 ^ x3
x2 ^= x3 ^ x1<<7
x0 = bits.RotateLeft32(x0, 5)
x2 = bits.RotateLeft32(x2, 22)
`
	ilt := `x2 = bits.RotateLeft32(x2, -22)
x0 = bits.RotateLeft32(x0, -5)
x2 ^= x3 ^ x1<<7
x0 ^= x1 ^ x3
x3 = bits.RotateLeft32(x3, -7)
x1 = bits.RotateLeft32(x1, -1)
x3 ^= x2 ^ x0<<3
x1 ^= x0 ^ x2
x2 = bits.RotateLeft32(x2, -3)
x0 = bits.RotateLeft32(x0, -13)
`
	keyx := func(idx string) string {
		return fmt.Sprintf("x0 ^= k[%[1]s][0]\nx1 ^= k[%[1]s][1]\nx2 ^= k[%[1]s][2]\nx3 ^= k[%[1]s][3]\n", idx)
	}

	// Encryption: rounds 0..23 in a loop of three groups of eight, then
	// rounds 24..31 unrolled (the last one without the linear transform).
	w.WriteString("// encryptWords encrypts one block held as four little-endian words.\n")
	w.WriteString("func encryptWords(k *[33][4]uint32, x0, x1, x2, x3 uint32) (uint32, uint32, uint32, uint32) {\n")
	w.WriteString("for r := 0; r < 24; r += 8 {\n")
	for i := 0; i < 8; i++ {
		w.WriteString(keyx(fmt.Sprintf("r+%d", i)))
		w.WriteString("{\n")
		emit(&w, fwd[i], x, x, "t")
		w.WriteString("}\n")
		w.WriteString(lt)
	}
	w.WriteString("}\n")
	for i := 24; i < 32; i++ {
		w.WriteString(keyx(fmt.Sprint(i)))
		w.WriteString("{\n")
		emit(&w, fwd[i%8], x, x, "t")
		w.WriteString("}\n")
		if i < 31 {
			w.WriteString(lt)
		}
	}
	w.WriteString(keyx("32"))
	w.WriteString("return x0, x1, x2, x3\n}\n\n")

	// Decryption: the inverse, rounds 31..8 then 7..0.
	w.WriteString("// decryptWords decrypts one block held as four little-endian words.\n")
	w.WriteString("func decryptWords(k *[33][4]uint32, x0, x1, x2, x3 uint32) (uint32, uint32, uint32, uint32) {\n")
	w.WriteString(keyx("32"))
	for i := 31; i >= 24; i-- {
		if i < 31 {
			w.WriteString(ilt)
		}
		w.WriteString("{\n")
		emit(&w, inv[i%8], x, x, "t")
		w.WriteString("}\n")
		w.WriteString(keyx(fmt.Sprint(i)))
	}
	w.WriteString("for r := 16; r >= 0; r -= 8 {\n")
	for i := 7; i >= 0; i-- {
		w.WriteString(ilt)
		w.WriteString("{\n")
		emit(&w, inv[i], x, x, "t")
		w.WriteString("}\n")
		w.WriteString(keyx(fmt.Sprintf("r+%d", i)))
	}
	w.WriteString("}\n")
	w.WriteString("return x0, x1, x2, x3\n}\n")

	src, err := format.Source(w.Bytes())
	if err != nil {
		os.Stdout.Write(w.Bytes())
		panic(err)
	}
	if err := os.WriteFile("sbox.go", src, 0o644); err != nil {
		panic(err)
	}
}
