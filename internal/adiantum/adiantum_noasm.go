//go:build !amd64 || purego

package adiantum

// Without the assembly only the generic implementation exists.
const (
	hasAVX2   = false
	hasAVX512 = false
)

func xorStream(_ implID, s *streamState, dst, src []byte, rounds int) {
	xorKeyStreamGeneric(s, dst, src, rounds)
}

func nhChunks(c *Cipher, msg, out []byte) { nhChunksGeneric(c, msg, out) }

func polyBlocks(_ implID, h *polyState, r *polyKey, msg []byte) { polyBlocksGeneric(h, r, msg) }
