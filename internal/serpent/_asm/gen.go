// Command _asm generates ../serpent_amd64.s, the AVX2 kernels of package
// serpent. Like internal/aes/_asm it is a plain text emitter with no
// dependencies, so the generated code can be regenerated offline.
//
// Every kernel works on 8 or 16 blocks bitsliced across the lanes of ymm
// registers: after a 4×4 transpose of 32-bit words inside each 128-bit lane,
// register j of a set holds word j of 8 blocks, so one instruction applies
// a gate of the S-box circuit to 8 blocks.
//
// The circuits are read from circuits.go, written by the search in
// search.go costed for AVX2 (go run . -search 1000). The same search,
// costed for scalar code where ANDN takes two instructions, writes
// ../sbox.go with the Go block functions (go run . -sbox ../sbox.go); those
// circuits would cost AVX2 about a tenth more gates. Every circuit is
// checked against the S-box tables, and the package tests compare the
// kernels with the Go code.
//
// Run with: cd internal/serpent/_asm && go run . -out ../serpent_amd64.s
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log"
	"os"
	"sort"
	"strings"
)

// gate is one statement of an S-box circuit: dst = a op b (b unused for
// "not"). Operands name the inputs x0..x3 or earlier temporaries.
type gate struct {
	dst, op, a, b string
}

type circuit struct {
	gates []gate
	outs  [4]string
}

// parseSrc parses the body of the one function in src.
func parseSrc(src string) circuit {
	f, err := parser.ParseFile(token.NewFileSet(), "", "package p\n"+src, 0)
	if err != nil {
		log.Fatal(err)
	}
	return parseBody(f.Decls[0].(*ast.FuncDecl))
}

// parseCircuits reads sbN and isbN from a file in the form of ../sbox.go.
func parseCircuits(path string) (fwd, inv [8]circuit) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		log.Fatal(err)
	}
	found := 0
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		var dst *[8]circuit
		var idx int
		if n, _ := fmt.Sscanf(fd.Name.Name, "sb%d", &idx); n == 1 && strings.HasPrefix(fd.Name.Name, "sb") {
			dst = &fwd
		} else if n, _ := fmt.Sscanf(fd.Name.Name, "isb%d", &idx); n == 1 && strings.HasPrefix(fd.Name.Name, "isb") {
			dst = &inv
		} else {
			continue
		}
		dst[idx] = parseBody(fd)
		found++
	}
	if found != 16 {
		log.Fatalf("found %d S-box functions in %s, want 16", found, path)
	}
	return
}

func ident(e ast.Expr) string {
	id, ok := e.(*ast.Ident)
	if !ok {
		log.Fatalf("operand %T is not a name", e)
	}
	return id.Name
}

func parseBody(fd *ast.FuncDecl) circuit {
	var c circuit
	for _, st := range fd.Body.List {
		switch s := st.(type) {
		case *ast.AssignStmt:
			if s.Tok == token.DEFINE {
				g := gate{dst: ident(s.Lhs[0])}
				switch e := s.Rhs[0].(type) {
				case *ast.BinaryExpr:
					g.a, g.b = ident(e.X), ident(e.Y)
					switch e.Op {
					case token.XOR:
						g.op = "xor"
					case token.AND:
						g.op = "and"
					case token.OR:
						g.op = "or"
					case token.AND_NOT:
						g.op = "andnot"
					default:
						log.Fatalf("%s: operator %s", fd.Name.Name, e.Op)
					}
				case *ast.UnaryExpr:
					if e.Op != token.XOR {
						log.Fatalf("%s: unary %s", fd.Name.Name, e.Op)
					}
					g.op, g.a = "not", ident(e.X)
				default:
					log.Fatalf("%s: expression %T", fd.Name.Name, e)
				}
				c.gates = append(c.gates, g)
			} else {
				for i := range 4 {
					c.outs[i] = ident(s.Rhs[i])
				}
			}
		case *ast.ReturnStmt:
		default:
			log.Fatalf("%s: statement %T", fd.Name.Name, st)
		}
	}
	return foldNots(c)
}

// foldNots rewrites a & ^x and ^x & a as ANDN and a &^ ^x as AND: the Go
// circuits were chosen for an instruction set without ANDN, and AVX2 needs
// a constant from memory for a NOT. NOTs left without uses are dropped.
func foldNots(c circuit) circuit {
	nots := map[string]string{}
	for _, g := range c.gates {
		if g.op == "not" {
			nots[g.dst] = g.a
		}
	}
	for i, g := range c.gates {
		switch g.op {
		case "and":
			if x, ok := nots[g.b]; ok {
				c.gates[i] = gate{dst: g.dst, op: "andnot", a: g.a, b: x}
			} else if x, ok := nots[g.a]; ok {
				c.gates[i] = gate{dst: g.dst, op: "andnot", a: g.b, b: x}
			}
		case "andnot":
			if x, ok := nots[g.b]; ok {
				c.gates[i] = gate{dst: g.dst, op: "and", a: g.a, b: x}
			}
		}
	}
	for {
		used := map[string]bool{}
		for _, o := range c.outs {
			used[o] = true
		}
		for _, g := range c.gates {
			used[g.a] = true
			if g.op != "not" {
				used[g.b] = true
			}
		}
		var kept []gate
		for _, g := range c.gates {
			if used[g.dst] {
				kept = append(kept, g)
			}
		}
		if len(kept) == len(c.gates) {
			return c
		}
		c.gates = kept
	}
}

// eval runs a circuit on truth tables, to check the rewritten circuits
// against the S-box tables before any code is written.
func (c circuit) eval() [4]uint16 {
	v := map[string]uint16{"x0": 0xaaaa, "x1": 0xcccc, "x2": 0xf0f0, "x3": 0xff00}
	for _, g := range c.gates {
		a, b := v[g.a], v[g.b]
		switch g.op {
		case "xor":
			v[g.dst] = a ^ b
		case "and":
			v[g.dst] = a & b
		case "or":
			v[g.dst] = a | b
		case "andnot":
			v[g.dst] = a &^ b
		case "not":
			v[g.dst] = ^a
		}
	}
	return [4]uint16{v[c.outs[0]], v[c.outs[1]], v[c.outs[2]], v[c.outs[3]]}
}

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

func tables(s [16]uint8) (o [4]uint16) {
	for x := range 16 {
		for k := range 4 {
			if s[x]>>k&1 != 0 {
				o[k] |= 1 << x
			}
		}
	}
	return
}

func checkCircuits(fwd, inv [8]circuit) {
	for i := range 8 {
		var is [16]uint8
		for x, y := range sboxes[i] {
			is[y] = uint8(x)
		}
		if fwd[i].eval() != tables(sboxes[i]) || inv[i].eval() != tables(is) {
			log.Fatalf("S-box %d: circuit does not match the table", i)
		}
	}
}

// gen emits Go assembly. Registers Y0..Y15 are handed out from a free list;
// the state of set s (8 blocks) is st[s][j], the register holding word j.
// Renaming instead of moving keeps S-box outputs where they were computed.
type gen struct {
	buf   bytes.Buffer
	free  []int
	st    [2][4]int
	label int
	args  map[string]int
	sets  int
	fwd   [8]circuit
	inv   [8]circuit
}

func (g *gen) p(format string, a ...any) { fmt.Fprintf(&g.buf, "\t"+format+"\n", a...) }
func (g *gen) lbl(l string)              { fmt.Fprintf(&g.buf, "%s:\n", l) }

func (g *gen) newLabel(p string) string {
	g.label++
	return fmt.Sprintf("%s_%d", p, g.label)
}

func y(r int) string { return fmt.Sprintf("Y%d", r) }
func x(r int) string { return fmt.Sprintf("X%d", r) }

func (g *gen) resetRegs() {
	g.free = g.free[:0]
	for r := 15; r >= 0; r-- {
		g.free = append(g.free, r)
	}
}

func (g *gen) alloc() int {
	if len(g.free) == 0 {
		lines := strings.Split(g.buf.String(), "\n")
		log.Fatalf("out of registers after:\n%s", strings.Join(lines[max(0, len(lines)-30):], "\n"))
	}
	r := g.free[len(g.free)-1]
	g.free = g.free[:len(g.free)-1]
	return r
}

func (g *gen) release(rs ...int) {
	for _, r := range rs {
		for _, f := range g.free {
			if f == r {
				lines := strings.Split(g.buf.String(), "\n")
				log.Fatalf("Y%d released twice after:\n%s", r, strings.Join(lines[max(0, len(lines)-12):], "\n"))
			}
		}
		g.free = append(g.free, r)
	}
}

func (g *gen) begin(name, doc string, args ...string) {
	g.args = map[string]int{}
	for i, a := range args {
		g.args[a] = 8 * i
	}
	fmt.Fprintf(&g.buf, "\n// func %s(%s)\n", name, strings.Join(args, ", "))
	for _, l := range strings.Split(doc, "\n") {
		fmt.Fprintf(&g.buf, "// %s\n", l)
	}
	fmt.Fprintf(&g.buf, "TEXT ·%s(SB), NOSPLIT, $0-%d\n", name, 8*len(args))
	g.resetRegs()
}

func (g *gen) arg(name, reg string) {
	off, ok := g.args[name]
	if !ok {
		log.Fatalf("unknown arg %s", name)
	}
	g.p("MOVQ %s+%d(FP), %s", name, off, reg)
}

// transpose swaps words and blocks inside each 128-bit lane of four
// registers: register m holding blocks 2m and 2m+1 becomes register j
// holding word j of the blocks 0, 2, 4, 6 (low lane) and 1, 3, 5, 7 (high
// lane). It is its own inverse. The inputs are released unless keep is set.
func (g *gen) transpose(in [4]int, keep bool) (out [4]int) {
	t0, t1 := g.alloc(), g.alloc()
	g.p("VPUNPCKLDQ %s, %s, %s", y(in[1]), y(in[0]), y(t0))
	g.p("VPUNPCKHDQ %s, %s, %s", y(in[1]), y(in[0]), y(t1))
	if !keep {
		g.release(in[0], in[1])
	}
	t2, t3 := g.alloc(), g.alloc()
	g.p("VPUNPCKLDQ %s, %s, %s", y(in[3]), y(in[2]), y(t2))
	g.p("VPUNPCKHDQ %s, %s, %s", y(in[3]), y(in[2]), y(t3))
	if !keep {
		g.release(in[2], in[3])
	}
	out[0], out[1] = g.alloc(), g.alloc()
	g.p("VPUNPCKLQDQ %s, %s, %s", y(t2), y(t0), y(out[0]))
	g.p("VPUNPCKHQDQ %s, %s, %s", y(t2), y(t0), y(out[1]))
	g.release(t0, t2)
	out[2], out[3] = g.alloc(), g.alloc()
	g.p("VPUNPCKLQDQ %s, %s, %s", y(t3), y(t1), y(out[2]))
	g.p("VPUNPCKHQDQ %s, %s, %s", y(t3), y(t1), y(out[3]))
	g.release(t1, t3)
	return out
}

// keyXor xors round key words at off(kp) into every set.
func (g *gen) keyXor(kp string, off int) {
	for j := range 4 {
		t := g.alloc()
		g.p("VPBROADCASTD %d(%s), %s", off+4*j, kp, y(t))
		for s := 0; s < g.sets; s++ {
			g.p("VPXOR %s, %s, %s", y(t), y(g.st[s][j]), y(g.st[s][j]))
		}
		g.release(t)
	}
}

// sbox applies circuit c to set s. A value's register is released after
// its last use, so the circuit runs in the free registers.
func (g *gen) sbox(c circuit, s int) {
	c = schedule(c)
	last := map[string]int{}
	for i, gt := range c.gates {
		last[gt.a] = i
		if gt.op != "not" {
			last[gt.b] = i
		}
	}
	isOut := map[string]bool{}
	for _, o := range c.outs {
		isOut[o] = true
	}
	reg := map[string]int{}
	for j := range 4 {
		reg[fmt.Sprintf("x%d", j)] = g.st[s][j]
	}
	// An input that is no output and never read is dead from the start.
	for j := range 4 {
		n := fmt.Sprintf("x%d", j)
		if _, read := last[n]; !read && !isOut[n] {
			g.release(reg[n])
		}
	}
	for i, gt := range c.gates {
		ra, rb := reg[gt.a], reg[gt.b]
		for _, n := range []string{gt.a, gt.b} {
			if gt.op == "not" && n == gt.b {
				continue
			}
			if last[n] == i && !isOut[n] {
				if _, ok := reg[n]; ok {
					g.release(reg[n])
					delete(reg, n)
				}
			}
		}
		d := g.alloc()
		reg[gt.dst] = d
		switch gt.op {
		case "xor":
			g.p("VPXOR %s, %s, %s", y(rb), y(ra), y(d))
		case "and":
			g.p("VPAND %s, %s, %s", y(rb), y(ra), y(d))
		case "or":
			g.p("VPOR %s, %s, %s", y(rb), y(ra), y(d))
		case "andnot":
			g.p("VPANDN %s, %s, %s", y(ra), y(rb), y(d))
		case "not":
			g.p("VPXOR ones<>(SB), %s, %s", y(ra), y(d))
		}
		if _, read := last[gt.dst]; !read && !isOut[gt.dst] {
			log.Fatal("dead gate")
		}
	}
	for j, o := range c.outs {
		g.st[s][j] = reg[o]
	}
}

// schedule reorders the gates greedily so that few values are live at
// once: of the gates whose operands are ready, the one that ends the most
// lives goes first (then the earliest). Two sets of state leave twelve
// registers for one S-box, which the circuits in their written order can
// exceed.
func schedule(c circuit) circuit {
	uses := map[string]int{}
	for _, gt := range c.gates {
		uses[gt.a]++
		if gt.op != "not" {
			uses[gt.b]++
		}
	}
	isOut := map[string]bool{}
	for _, o := range c.outs {
		isOut[o] = true
	}
	ready := map[string]bool{"x0": true, "x1": true, "x2": true, "x3": true}
	done := make([]bool, len(c.gates))
	var order []gate
	for len(order) < len(c.gates) {
		best, bestScore := -1, 0
		for i, gt := range c.gates {
			if done[i] || !ready[gt.a] || (gt.op != "not" && !ready[gt.b]) {
				continue
			}
			score := 1 // the new value
			ops := []string{gt.a}
			if gt.op != "not" && gt.b != gt.a {
				ops = append(ops, gt.b)
			}
			for _, o := range ops {
				if uses[o] == 1 && !isOut[o] {
					score--
				}
			}
			if best < 0 || score < bestScore {
				best, bestScore = i, score
			}
		}
		gt := c.gates[best]
		done[best] = true
		order = append(order, gt)
		ready[gt.dst] = true
		uses[gt.a]--
		if gt.op != "not" {
			uses[gt.b]--
		}
	}
	return circuit{gates: order, outs: c.outs}
}

// rotl rotates register r left by n in place.
func (g *gen) rotl(r, n int) {
	t := g.alloc()
	if n == 1 {
		g.p("VPADDD %s, %s, %s", y(r), y(r), y(t))
	} else {
		g.p("VPSLLD $%d, %s, %s", n, y(r), y(t))
	}
	g.p("VPSRLD $%d, %s, %s", 32-n, y(r), y(r))
	g.p("VPOR %s, %s, %s", y(t), y(r), y(r))
	g.release(t)
}

// xorShl does r ^= a ^ b<<n.
func (g *gen) xorShl(r, a, b, n int) {
	t := g.alloc()
	g.p("VPSLLD $%d, %s, %s", n, y(b), y(t))
	g.p("VPXOR %s, %s, %s", y(a), y(r), y(r))
	g.p("VPXOR %s, %s, %s", y(t), y(r), y(r))
	g.release(t)
}

func (g *gen) xor2(r, a, b int) {
	g.p("VPXOR %s, %s, %s", y(a), y(r), y(r))
	g.p("VPXOR %s, %s, %s", y(b), y(r), y(r))
}

// lt is the linear transformation of the Serpent rounds, applied to every
// set with the steps of the sets interleaved, so that neighbouring
// instructions are independent.
func (g *gen) lt() {
	g.steps([]func(s [4]int){
		func(x [4]int) { g.rotl(x[0], 13) },
		func(x [4]int) { g.rotl(x[2], 3) },
		func(x [4]int) { g.xor2(x[1], x[0], x[2]) },
		func(x [4]int) { g.xorShl(x[3], x[2], x[0], 3) },
		func(x [4]int) { g.rotl(x[1], 1) },
		func(x [4]int) { g.rotl(x[3], 7) },
		func(x [4]int) { g.xor2(x[0], x[1], x[3]) },
		func(x [4]int) { g.xorShl(x[2], x[3], x[1], 7) },
		func(x [4]int) { g.rotl(x[0], 5) },
		func(x [4]int) { g.rotl(x[2], 22) },
	})
}

// ilt is its inverse.
func (g *gen) ilt() {
	g.steps([]func(s [4]int){
		func(x [4]int) { g.rotl(x[2], 32-22) },
		func(x [4]int) { g.rotl(x[0], 32-5) },
		func(x [4]int) { g.xorShl(x[2], x[3], x[1], 7) },
		func(x [4]int) { g.xor2(x[0], x[1], x[3]) },
		func(x [4]int) { g.rotl(x[3], 32-7) },
		func(x [4]int) { g.rotl(x[1], 32-1) },
		func(x [4]int) { g.xorShl(x[3], x[2], x[0], 3) },
		func(x [4]int) { g.xor2(x[1], x[0], x[2]) },
		func(x [4]int) { g.rotl(x[2], 32-3) },
		func(x [4]int) { g.rotl(x[0], 32-13) },
	})
}

func (g *gen) steps(fs []func(x [4]int)) {
	for _, f := range fs {
		for s := 0; s < g.sets; s++ {
			f(g.st[s])
		}
	}
}

// restore moves the state back into the registers of want (a loop's entry
// assignment), breaking cycles through a free register.
func (g *gen) restore(want [2][4]int) {
	type mv struct{ from, to int }
	var moves []mv
	for s := 0; s < g.sets; s++ {
		for j := range 4 {
			if g.st[s][j] != want[s][j] {
				moves = append(moves, mv{g.st[s][j], want[s][j]})
			}
		}
	}
	for len(moves) > 0 {
		progress := false
		for i := 0; i < len(moves); i++ {
			blocked := false
			for k, o := range moves {
				if k != i && o.from == moves[i].to {
					blocked = true
				}
			}
			if !blocked {
				g.p("VMOVDQA %s, %s", y(moves[i].from), y(moves[i].to))
				moves = append(moves[:i], moves[i+1:]...)
				progress = true
				break
			}
		}
		if !progress {
			t := g.alloc()
			g.p("VMOVDQA %s, %s", y(moves[0].from), y(t))
			for k := range moves {
				if moves[k].from == moves[0].from {
					moves[k].from = t
				}
			}
		}
	}
	g.st = want
	// The free list must be what the loop entry had: every register not
	// in the state.
	used := map[int]bool{}
	for s := 0; s < g.sets; s++ {
		for _, r := range want[s] {
			used[r] = true
		}
	}
	g.free = g.free[:0]
	for r := 15; r >= 0; r-- {
		if !used[r] {
			g.free = append(g.free, r)
		}
	}
}

// snapshot returns the state and free list, for code emitted once but
// entered with the same registers on every pass of a loop.
func (g *gen) snapshot() ([2][4]int, []int) {
	return g.st, append([]int(nil), g.free...)
}

func (g *gen) setFree(f []int) { g.free = append(g.free[:0], f...) }

// encrypt emits the 32 rounds as a loop over four groups of eight rounds.
// kp is the round key pointer (advanced), cnt a scratch counter.
func (g *gen) encrypt(key, kp, cnt string) {
	g.p("MOVQ %s, %s", key, kp)
	g.p("MOVQ $4, %s", cnt)
	entry, free := g.snapshot()
	loop, done := g.newLabel("enc"), g.newLabel("encdone")
	g.lbl(loop)
	for i := range 8 {
		g.keyXor(kp, 16*i)
		for s := 0; s < g.sets; s++ {
			g.sbox(g.fwd[i], s)
		}
		if i < 7 {
			g.lt()
		}
	}
	g.p("DECQ %s", cnt)
	g.p("JZ %s", done)
	exitSt, exitFree := g.snapshot()
	g.lt()
	g.p("ADDQ $128, %s", kp)
	g.restore(entry)
	g.setFree(free)
	g.p("JMP %s", loop)
	g.lbl(done)
	// After the loop the registers are those at the JZ.
	g.st = exitSt
	g.setFree(exitFree)
	g.keyXor(kp, 128)
}

func (g *gen) decrypt(key, kp, cnt string) {
	g.p("LEAQ 384(%s), %s", key, kp)
	g.p("MOVQ $4, %s", cnt)
	g.keyXor(kp, 128)
	entry, free := g.snapshot()
	loop, done := g.newLabel("dec"), g.newLabel("decdone")
	g.lbl(loop)
	for i := 7; i >= 0; i-- {
		for s := 0; s < g.sets; s++ {
			g.sbox(g.inv[i], s)
		}
		g.keyXor(kp, 16*i)
		if i > 0 {
			g.ilt()
		}
	}
	g.p("DECQ %s", cnt)
	g.p("JZ %s", done)
	exitSt, exitFree := g.snapshot()
	g.ilt()
	g.p("SUBQ $128, %s", kp)
	g.restore(entry)
	g.setFree(free)
	g.p("JMP %s", loop)
	g.lbl(done)
	g.st = exitSt
	g.setFree(exitFree)
}

// load reads 8 contiguous blocks per set from base (xor'ed with the blocks
// at xorBase if given) and transposes them into the state.
func (g *gen) load(base, xorBase string) {
	for s := 0; s < g.sets; s++ {
		var in [4]int
		for m := range 4 {
			in[m] = g.alloc()
			g.p("VMOVDQU %d(%s), %s", 128*s+32*m, base, y(in[m]))
			if xorBase != "" {
				g.p("VPXOR %d(%s), %s, %s", 128*s+32*m, xorBase, y(in[m]), y(in[m]))
			}
		}
		g.st[s] = g.transpose(in, false)
	}
}

// store transposes the state back and writes it to base, xor'ed with the
// blocks at xorBase if given. Sets and registers go from the last block to
// the first, which lets CBC decryption read each previous ciphertext block
// before an in-place store overwrites it.
func (g *gen) store(base string, post func(s, m, r int)) {
	var out [2][4]int
	for s := 0; s < g.sets; s++ {
		out[s] = g.transpose(g.st[s], false)
	}
	for s := g.sets - 1; s >= 0; s-- {
		for m := 3; m >= 0; m-- {
			r := out[s][m]
			if post != nil {
				post(s, m, r)
			}
			g.p("VMOVDQU %s, %d(%s)", y(r), 128*s+32*m, base)
			g.release(r)
		}
	}
}

func (g *gen) ecb(enc bool) {
	n := 8 * g.sets
	name, verb := fmt.Sprintf("decECB%dAVX2", n), "decrypts"
	if enc {
		name, verb = fmt.Sprintf("encECB%dAVX2", n), "encrypts"
	}
	g.begin(name, fmt.Sprintf("%s n groups of %d contiguous blocks.", verb, n), "xk", "dst", "src", "n")
	g.arg("xk", "AX")
	g.arg("dst", "DI")
	g.arg("src", "SI")
	g.arg("n", "DX")
	top := g.newLabel("ecb")
	g.lbl(top)
	g.load("SI", "")
	if enc {
		g.encrypt("AX", "R8", "CX")
	} else {
		g.decrypt("AX", "R8", "CX")
	}
	g.store("DI", nil)
	g.p("ADDQ $%d, SI", 16*n)
	g.p("ADDQ $%d, DI", 16*n)
	g.p("DECQ DX")
	g.p("JNZ %s", top)
	g.p("VZEROUPPER")
	g.p("RET")
}

func (g *gen) xts(enc bool) {
	n := 8 * g.sets
	name, verb := fmt.Sprintf("decXTS%dAVX2", n), "decrypts"
	if enc {
		name, verb = fmt.Sprintf("encXTS%dAVX2", n), "encrypts"
	}
	g.begin(name, fmt.Sprintf("%s %d contiguous blocks, each xor'ed before and after\nwith its tweak from tw.", verb, n),
		"xk", "dst", "src", "tw")
	g.arg("xk", "AX")
	g.arg("dst", "DI")
	g.arg("src", "SI")
	g.arg("tw", "BX")
	g.load("SI", "BX")
	if enc {
		g.encrypt("AX", "R8", "CX")
	} else {
		g.decrypt("AX", "R8", "CX")
	}
	g.store("DI", func(s, m, r int) {
		g.p("VPXOR %d(BX), %s, %s", 128*s+32*m, y(r), y(r))
	})
	g.p("VZEROUPPER")
	g.p("RET")
}

// xtsLoop is XTS over n groups of 16 blocks with the tweaks computed in
// general-purpose registers: that work is independent of the vector rounds
// still in flight, so the out-of-order core overlaps the two, where tweaks
// made in Go between calls would run alone.
func (g *gen) xtsLoop(enc bool) {
	n := 8 * g.sets
	name, verb := fmt.Sprintf("decXTSLoop%dAVX2", n), "decrypts"
	if enc {
		name, verb = fmt.Sprintf("encXTSLoop%dAVX2", n), "encrypts"
	}
	g.begin(name, fmt.Sprintf("%s n groups of %d contiguous blocks from the tweak at t, which\nit advances past them; tw is scratch for one group's tweaks.", verb, n),
		"xk", "dst", "src", "n", "t", "tw")
	g.arg("xk", "AX")
	g.arg("dst", "DI")
	g.arg("src", "SI")
	g.arg("n", "DX")
	g.arg("t", "R9")
	g.arg("tw", "BX")
	g.p("MOVQ (R9), R12")
	g.p("MOVQ 8(R9), R13")
	top := g.newLabel("xts")
	g.lbl(top)
	for i := range n {
		g.p("MOVQ R12, %d(BX)", 16*i)
		g.p("MOVQ R13, %d(BX)", 16*i+8)
		// t·x in GF(2^128): the carry out of the low half enters the
		// high half, the one out of the high half folds back as 0x87.
		g.p("SHLQ $1, R12")
		g.p("RCLQ $1, R13")
		g.p("SBBQ R14, R14")
		g.p("ANDQ $0x87, R14")
		g.p("XORQ R14, R12")
	}
	g.load("SI", "BX")
	if enc {
		g.encrypt("AX", "R8", "CX")
	} else {
		g.decrypt("AX", "R8", "CX")
	}
	g.store("DI", func(s, m, r int) {
		g.p("VPXOR %d(BX), %s, %s", 128*s+32*m, y(r), y(r))
	})
	g.p("ADDQ $%d, SI", 16*n)
	g.p("ADDQ $%d, DI", 16*n)
	g.p("DECQ DX")
	g.p("JNZ %s", top)
	g.p("MOVQ R12, (R9)")
	g.p("MOVQ R13, 8(R9)")
	g.p("VZEROUPPER")
	g.p("RET")
}

func (g *gen) cbcDec() {
	n := 8 * g.sets
	g.begin(fmt.Sprintf("decCBC%dAVX2", n),
		fmt.Sprintf("decrypts n groups of %d contiguous CBC blocks; the first block is chained\nto iv, the others to their predecessors in src. dst may be src: the groups\ngo from the last to the first, so every predecessor is read before it is\noverwritten.", n),
		"xk", "dst", "src", "n", "iv")
	g.arg("xk", "AX")
	g.arg("dst", "DI")
	g.arg("src", "SI")
	g.arg("n", "DX")
	g.arg("iv", "R9")
	g.p("LEAQ -1(DX), R10")
	g.p("SHLQ $%d, R10", map[int]int{8: 7, 16: 8}[n])
	g.p("ADDQ R10, SI")
	g.p("ADDQ R10, DI")
	top := g.newLabel("cbcdec")
	g.lbl(top)
	g.p("LEAQ -16(SI), BX")
	g.p("CMPQ DX, $1")
	g.p("CMOVQEQ R9, BX")
	g.load("SI", "")
	g.decrypt("AX", "R8", "CX")
	g.store("DI", func(s, m, r int) {
		if s == 0 && m == 0 {
			t := g.alloc()
			g.p("VMOVDQU (BX), %s", x(t))
			g.p("VINSERTI128 $1, (SI), %s, %s", y(t), y(t))
			g.p("VPXOR %s, %s, %s", y(t), y(r), y(r))
			g.release(t)
			return
		}
		g.p("VPXOR %d(SI), %s, %s", 128*s+32*m-16, y(r), y(r))
	})
	g.p("SUBQ $%d, SI", 16*n)
	g.p("SUBQ $%d, DI", 16*n)
	g.p("DECQ DX")
	g.p("JNZ %s", top)
	g.p("VZEROUPPER")
	g.p("RET")
}

// cbcEncMB encrypts 8·sets CBC chains side by side, one per lane; the
// ciphertext stays in the state registers as the next block's chaining
// value, so only the plaintext is transposed in.
func (g *gen) cbcEncMB() {
	n := 8 * g.sets
	g.begin(fmt.Sprintf("encCBCMB%dAVX2", n),
		fmt.Sprintf("encrypts %d CBC chains of nb blocks side by side: chain i starts at\noffset offs[i] of src and dst, with the IV at ivs+16i. Chains may repeat\n(equal offsets), which pads a batch to %d lanes.", n, n),
		"xk", "dst", "src", "offs", "nb", "ivs")
	g.arg("xk", "AX")
	g.arg("dst", "DI")
	g.arg("src", "SI")
	g.arg("offs", "BX")
	g.arg("nb", "DX")
	g.arg("ivs", "R9")
	g.load("R9", "")
	entry, free := g.snapshot()
	top := g.newLabel("cbcmb")
	g.lbl(top)
	for s := 0; s < g.sets; s++ {
		var in [4]int
		for m := range 4 {
			a := 8*s + 2*m
			in[m] = g.alloc()
			g.p("MOVQ %d(BX), R10", 8*a)
			g.p("MOVQ %d(BX), R11", 8*(a+1))
			g.p("VMOVDQU (SI)(R10*1), %s", x(in[m]))
			g.p("VINSERTI128 $1, (SI)(R11*1), %s, %s", y(in[m]), y(in[m]))
		}
		p := g.transpose(in, false)
		for j := range 4 {
			g.p("VPXOR %s, %s, %s", y(p[j]), y(g.st[s][j]), y(g.st[s][j]))
		}
		g.release(p[:]...)
	}
	g.encrypt("AX", "R8", "CX")
	for s := 0; s < g.sets; s++ {
		out := g.transpose(g.st[s], true)
		for m := range 4 {
			a := 8*s + 2*m
			g.p("MOVQ %d(BX), R10", 8*a)
			g.p("MOVQ %d(BX), R11", 8*(a+1))
			g.p("VMOVDQU %s, (DI)(R10*1)", x(out[m]))
			g.p("VEXTRACTI128 $1, %s, (DI)(R11*1)", y(out[m]))
		}
		g.release(out[:]...)
	}
	g.p("ADDQ $16, SI")
	g.p("ADDQ $16, DI")
	g.p("DECQ DX")
	g.p("JZ %s", top+"_end")
	g.restore(entry)
	g.setFree(free)
	g.p("JMP %s", top)
	g.lbl(top + "_end")
	g.p("VZEROUPPER")
	g.p("RET")
}

func main() {
	out := flag.String("out", "../serpent_amd64.s", "output file")
	circuits := flag.String("circuits", "circuits.go", "S-box circuits to read, or with -search to write")
	trials := flag.Int("search", 0, "search the S-box circuits with this many trials each, write them and exit")
	sbox := flag.String("sbox", "", "write the scalar Go S-boxes and block functions (../sbox.go) here and exit")
	sboxTrials := flag.Int("sbox-trials", 20000, "trials per S-box for -sbox")
	flag.Parse()
	if *trials > 0 {
		search(*circuits, *trials)
		return
	}
	if *sbox != "" {
		writeSboxGo(*sbox, *sboxTrials)
		return
	}
	g := &gen{}
	g.fwd, g.inv = parseCircuits(*circuits)
	checkCircuits(g.fwd, g.inv)
	var gates []string
	for i := range 8 {
		gates = append(gates, fmt.Sprintf("S%d %d/%d", i, len(g.fwd[i].gates), len(g.inv[i].gates)))
	}
	sort.Strings(gates)
	g.buf.WriteString("// Code generated by internal/serpent/_asm. DO NOT EDIT.\n\n")
	g.buf.WriteString("//go:build amd64 && !purego\n\n")
	g.buf.WriteString("#include \"textflag.h\"\n\n")
	fmt.Fprintf(&g.buf, "// Gates per S-box (forward/inverse): %s.\n\n", strings.Join(gates, ", "))
	g.buf.WriteString("// All ones, for the NOT gates the circuits keep.\n")
	for i := range 4 {
		fmt.Fprintf(&g.buf, "DATA ones<>+%d(SB)/8, $-1\n", 8*i)
	}
	g.buf.WriteString("GLOBL ones<>(SB), RODATA|NOPTR, $32\n")
	for _, sets := range []int{2, 1} {
		g.sets = sets
		g.ecb(true)
		g.ecb(false)
		if sets == 1 {
			g.xts(true)
			g.xts(false)
		} else {
			g.xtsLoop(true)
			g.xtsLoop(false)
		}
		g.cbcDec()
		g.cbcEncMB()
	}
	if err := os.WriteFile(*out, g.buf.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
}
