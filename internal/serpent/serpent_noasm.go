//go:build !amd64 || purego

package serpent

// Without the assembly only the generic implementation exists; the stubs
// keep bulk.go free of build tags and are never reached.

const hasAVX2 = false

func encECB16AVX2(xk *[33][4]uint32, dst, src *byte, n int) { panic("serpent: no avx2") }
func decECB16AVX2(xk *[33][4]uint32, dst, src *byte, n int) { panic("serpent: no avx2") }
func encECB8AVX2(xk *[33][4]uint32, dst, src *byte, n int)  { panic("serpent: no avx2") }
func decECB8AVX2(xk *[33][4]uint32, dst, src *byte, n int)  { panic("serpent: no avx2") }
func encXTS8AVX2(xk *[33][4]uint32, dst, src, tw *byte)     { panic("serpent: no avx2") }
func decXTS8AVX2(xk *[33][4]uint32, dst, src, tw *byte)     { panic("serpent: no avx2") }
func encXTSLoop16AVX2(xk *[33][4]uint32, dst, src *byte, n int, t *tweak, tw *byte) {
	panic("serpent: no avx2")
}
func decXTSLoop16AVX2(xk *[33][4]uint32, dst, src *byte, n int, t *tweak, tw *byte) {
	panic("serpent: no avx2")
}
func decCBC16AVX2(xk *[33][4]uint32, dst, src *byte, n int, iv *byte) { panic("serpent: no avx2") }
func decCBC8AVX2(xk *[33][4]uint32, dst, src *byte, n int, iv *byte)  { panic("serpent: no avx2") }
func encCBCMB16AVX2(xk *[33][4]uint32, dst, src *byte, offs *[16]int, nb int, ivs *byte) {
	panic("serpent: no avx2")
}
func encCBCMB8AVX2(xk *[33][4]uint32, dst, src *byte, offs *[16]int, nb int, ivs *byte) {
	panic("serpent: no avx2")
}
