//go:build !(amd64 || arm64) || purego

package aes

// Only the generic implementation exists here; the arch hooks are never
// reached because no Block gets a non-generic impl.

func archImpls() []implID { return nil }

func archMissing(impl string) string {
	return "built without assembly (purego, or neither amd64 nor arm64)"
}

func unreachable() { panic("aes: no assembly implementation in this build") }

func archBlock(b *Block, enc bool, dst, src []byte)                           { unreachable() }
func archECB(b *Block, enc bool, dst, src []byte)                             { unreachable() }
func archEncCBC(b *Block, dst, src []byte, iv *[16]byte)                      { unreachable() }
func archDecCBC(b *Block, dst, src []byte, iv *[16]byte)                      { unreachable() }
func archEncESSIVCBC(b, ivKey *Block, dst, src []byte, iv *[16]byte)          { unreachable() }
func archDecESSIVCBC(b, ivKey *Block, dst, src []byte, iv *[16]byte)          { unreachable() }
func archEncCBCSectors(b *Block, dst, src []byte, sectorSize int, ivs []byte) { unreachable() }
func archXTS(b *Block, enc bool, dst, src []byte, t *[16]byte)                { unreachable() }

func archXTSSectors(b *Block, enc bool, dst, src []byte, ss int, tws []byte) bool { return false }

func archDecCBCSectors(b *Block, dst, src []byte, ss int, ivs []byte) bool { return false }

func archEncESSIVCBCSectors(b, ivKey *Block, dst, src []byte, ss int, ivs []byte) int { return 0 }

func archXTSUnitPrefix(b, tk *Block, enc bool, dst, src []byte, iv, t *[16]byte) int { return 0 }

func archHasVAES512() bool { return false }

func archXTSTweaks(tk *Block, tws, ivs []byte) { tk.ecb(true, tws[:len(ivs)], ivs) }

func archXTSUnitZMM(b, tk *Block, enc bool, dst, src []byte, iv, t *[16]byte) { unreachable() }

func archPreferYMM() bool { return false }

func archFamily6Model() (uint32, bool) { return 0, false }

func archXTSUnit64ZMM(b, tk *Block, enc bool, dst, src []byte, sector uint64, t *[16]byte) {
	unreachable()
}

func archCBCEncryptGroup() int { return 16 }
