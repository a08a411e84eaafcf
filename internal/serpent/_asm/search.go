package main

// The S-box circuit search behind -search and -sbox: for each S-box and its
// inverse, many seeded randomised trials build the four outputs by Shannon
// and Davio decompositions, reusing every function already computed, and
// the cheapest circuit wins. The two uses cost gates differently (see
// costModel), so the same search yields the scalar circuits of ../sbox.go
// and the AVX2 circuits of circuits.go.

import (
	"bytes"
	"fmt"
	"go/format"
	"log"
	"math/rand"
	"os"
	"sort"
	"strings"
)

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

// A costModel is what the circuits are searched for.
type costModel struct {
	// andNotGates is what a &^ b costs: two instructions (NOT, AND) in
	// scalar amd64 code without BMI1, one VPANDN in AVX2.
	andNotGates int
	// reach2 tries one or two new gates over the known functions before
	// decomposing (worth its time for AVX2); otherwise only one gate.
	reach2 bool
	// maxRegs, when set, drops circuits that need more live registers than
	// that once their NOTs are folded, and ranks the rest by folded gate
	// count: the AVX2 kernels keep two sets of state in sixteen registers.
	maxRegs int
}

var (
	// scalarCost is ../sbox.go's model: go run . -sbox ../sbox.go (20000 trials).
	scalarCost = costModel{andNotGates: 2}
	// avx2Cost is circuits.go's model: go run . -search 1000.
	avx2Cost = costModel{andNotGates: 1, reach2: true, maxRegs: 12}
)

type net struct {
	nodes []node
	known map[uint16]int
	rng   *rand.Rand
	gates int
	cost  *costModel
}

var inputTT = [4]uint16{0xaaaa, 0xcccc, 0xf0f0, 0xff00}

func newCircuit(rng *rand.Rand, m *costModel) *net {
	c := &net{known: map[uint16]int{}, rng: rng, cost: m}
	for i := 0; i < 4; i++ {
		c.add(node{op: opIn, a: i, tt: inputTT[i]})
	}
	c.add(node{op: opConst, a: 0, tt: 0})
	c.add(node{op: opConst, a: 1, tt: 0xffff})
	return c
}

func (c *net) add(n node) int {
	if id, ok := c.known[n.tt]; ok {
		return id
	}
	c.nodes = append(c.nodes, n)
	id := len(c.nodes) - 1
	c.known[n.tt] = id
	switch n.op {
	case opIn, opConst:
	case opAndNot:
		c.gates += c.cost.andNotGates
	default:
		c.gates++
	}
	return id
}

func (c *net) mk(op, a, b int) int {
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

func apply(op int, a, b uint16) uint16 {
	switch op {
	case opXor:
		return a ^ b
	case opAnd:
		return a & b
	case opOr:
		return a | b
	case opAndNot:
		return a &^ b
	}
	return ^a
}

var binOps = []int{opXor, opAnd, opOr, opAndNot}

// reach2 finds f as one or two new gates over the known nodes.
func (c *net) reach2(f uint16) (int, bool) {
	ids := make([]int, 0, len(c.nodes))
	for id := range c.nodes {
		if c.nodes[id].op != opConst {
			ids = append(ids, id)
		}
	}
	for _, a := range ids {
		ta := c.nodes[a].tt
		if ^ta == f {
			return c.mk(opNot, a, a), true
		}
		for _, b := range ids {
			tb := c.nodes[b].tt
			for _, op := range binOps {
				if apply(op, ta, tb) == f {
					return c.mk(op, a, b), true
				}
			}
		}
	}
	for ai, a := range ids {
		ta := c.nodes[a].tt
		for bi, b := range ids {
			tb := c.nodes[b].tt
			for _, op := range append(binOps, opNot) {
				if op != opAndNot && op != opNot && bi < ai {
					continue
				}
				if op == opNot && bi != ai {
					continue
				}
				tg := apply(op, ta, tb)
				if _, ok := c.known[tg]; ok {
					continue
				}
				if ^tg == f {
					g := c.mk(op, a, b)
					return c.mk(opNot, g, g), true
				}
				for _, d := range ids {
					td := c.nodes[d].tt
					for _, op2 := range binOps {
						if apply(op2, tg, td) == f {
							g := c.mk(op, a, b)
							return c.mk(op2, g, d), true
						}
						if op2 == opAndNot && apply(op2, td, tg) == f {
							g := c.mk(op, a, b)
							return c.mk(op2, d, g), true
						}
					}
				}
			}
		}
	}
	return 0, false
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

// reach1 finds f as one new gate over the known functions, trying them in
// node order so that the search is reproducible.
func (c *net) reach1(f uint16) (int, bool) {
	ids := make([]int, 0, len(c.nodes))
	for _, id := range c.known {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	for _, a := range ids {
		for _, b := range ids {
			ta, tb := c.nodes[a].tt, c.nodes[b].tt
			switch f {
			case ta ^ tb:
				return c.mk(opXor, a, b), true
			case ta & tb:
				return c.mk(opAnd, a, b), true
			case ta | tb:
				return c.mk(opOr, a, b), true
			case ta &^ tb:
				return c.mk(opAndNot, a, b), true
			}
		}
	}
	return 0, false
}

// build returns a node computing f, adding gates as needed.
func (c *net) build(f uint16, depth int) int {
	if id, ok := c.known[f]; ok {
		return id
	}
	if id, ok := c.known[^f]; ok {
		return c.mk(opNot, id, id)
	}
	if c.cost.reach2 {
		if id, ok := c.reach2(f); ok {
			return id
		}
	} else if id, ok := c.reach1(f); ok {
		return id
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
	c    *net
	outs [4]int
}

func synth(m *costModel, s [16]uint8, seed int64, trials int) result {
	rng := rand.New(rand.NewSource(seed))
	target := outputsTT(s)
	var best result
	bestCost := 0
	for t := 0; t < trials; t++ {
		c := newCircuit(rng, m)
		order := rng.Perm(4)
		var outs [4]int
		for _, k := range order {
			outs[k] = c.build(target[k], 0)
		}
		// Outputs must be real gates or inputs; a constant cannot occur.
		r := result{c: c, outs: outs}
		cost := c.gates
		if m.maxRegs > 0 {
			fc := foldNots(r.circuit())
			if maxLive(schedule(fc)) > m.maxRegs {
				continue
			}
			cost = len(fc.gates)
		}
		if best.c == nil || cost < bestCost {
			best, bestCost = r, cost
		}
	}
	if best.c == nil {
		panic("no circuit fits the registers")
	}
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

// circuit converts a search result into the gate list gen emits from.
func (r result) circuit() circuit {
	var b bytes.Buffer
	emit(&b, r, [4]string{"x0", "x1", "x2", "x3"}, [4]string{"x0", "x1", "x2", "x3"}, "t")
	return parseSrc("func f(x0, x1, x2, x3 uint32) (uint32, uint32, uint32, uint32) {\n" + b.String() + "return x0, x1, x2, x3\n}\n")
}

// maxLive counts the registers sbox needs for c in the given order.
func maxLive(c circuit) int {
	last := map[string]int{}
	for i, g := range c.gates {
		last[g.a] = i
		last[g.b] = i
	}
	isOut := map[string]bool{}
	for _, o := range c.outs {
		isOut[o] = true
	}
	live := map[string]bool{}
	for j := range 4 {
		n := fmt.Sprintf("x%d", j)
		if _, read := last[n]; read || isOut[n] {
			live[n] = true
		}
	}
	peak := len(live)
	for i, g := range c.gates {
		for _, n := range []string{g.a, g.b} {
			if last[n] == i && !isOut[n] {
				delete(live, n)
			}
		}
		live[g.dst] = true
		peak = max(peak, len(live))
	}
	return peak
}

// search writes the circuits of trials trials per S-box to path.
func search(path string, trials int) {
	x := [4]string{"x0", "x1", "x2", "x3"}
	var w bytes.Buffer
	w.WriteString("// Code generated by go run . -search; DO NOT EDIT.\n\n")
	w.WriteString("//go:build ignore\n\n")
	w.WriteString("// The S-box circuits of the AVX2 kernels, in the form of ../sbox.go.\n\n")
	w.WriteString("package main\n\n")
	total := 0
	for i := range 8 {
		fwd := synth(&avx2Cost, sboxes[i], int64(1000+i), trials)
		inv := synth(&avx2Cost, inverse(sboxes[i]), int64(2000+i), trials)
		total += countUsed(fwd) + countUsed(inv)
		fmt.Fprintf(os.Stderr, "S%d: %d gates, S%d^-1: %d gates\n", i, countUsed(fwd), i, countUsed(inv))
		fmt.Fprintf(&w, "func sb%d(x0, x1, x2, x3 uint32) (uint32, uint32, uint32, uint32) {\n", i)
		emit(&w, fwd, x, x, "t")
		w.WriteString("return x0, x1, x2, x3\n}\n\n")
		fmt.Fprintf(&w, "func isb%d(x0, x1, x2, x3 uint32) (uint32, uint32, uint32, uint32) {\n", i)
		emit(&w, inv, x, x, "t")
		w.WriteString("return x0, x1, x2, x3\n}\n\n")
	}
	fmt.Fprintf(os.Stderr, "total %d gates\n", total)
	src, err := format.Source(w.Bytes())
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(path, src, 0o644); err != nil {
		log.Fatal(err)
	}
}
