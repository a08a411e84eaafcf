package adiantum

import "encoding/binary"

// NH as Linux's nhpoly1305 uses it: 4 passes over messages of up to 1024
// bytes in 16-byte units, each pass 2 products of 32-bit sums per unit, the
// passes' keys 4 words apart.
const (
	nhUnit     = 16
	nhMsgBytes = 1024
	nhKeyWords = nhMsgBytes/4 + 4*3 // 268: a pass's key runs 4 words past the previous one's
	nhKeyBytes = 4 * nhKeyWords     // 1072
	nhHashSize = 32                 // 4 passes × 64 bits
)

// nhGeneric hashes msg (a multiple of 16 bytes, at most 1024) into out.
func nhGeneric(key *[nhKeyWords]uint32, msg []byte, out *[nhHashSize]byte) {
	var s0, s1, s2, s3 uint64
	k := key[:]
	for len(msg) >= nhUnit {
		m0 := binary.LittleEndian.Uint32(msg[0:])
		m1 := binary.LittleEndian.Uint32(msg[4:])
		m2 := binary.LittleEndian.Uint32(msg[8:])
		m3 := binary.LittleEndian.Uint32(msg[12:])
		s0 += uint64(m0+k[0])*uint64(m2+k[2]) + uint64(m1+k[1])*uint64(m3+k[3])
		s1 += uint64(m0+k[4])*uint64(m2+k[6]) + uint64(m1+k[5])*uint64(m3+k[7])
		s2 += uint64(m0+k[8])*uint64(m2+k[10]) + uint64(m1+k[9])*uint64(m3+k[11])
		s3 += uint64(m0+k[12])*uint64(m2+k[14]) + uint64(m1+k[13])*uint64(m3+k[15])
		k = k[4:]
		msg = msg[nhUnit:]
	}
	binary.LittleEndian.PutUint64(out[0:], s0)
	binary.LittleEndian.PutUint64(out[8:], s1)
	binary.LittleEndian.PutUint64(out[16:], s2)
	binary.LittleEndian.PutUint64(out[24:], s3)
}
