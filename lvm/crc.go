package lvm

import "hash/crc32"

// initialCRC is the seed lvm2 gives its CRC (lib/misc/crc.h INITIAL_CRC).
// lvm2's calc_crc is the reflected CRC-32 of polynomial 0xedb88320 without
// the usual inversion before and after, so it equals the standard IEEE
// update wrapped in two complements.
const initialCRC = 0xf597a6cf

// lvmCRC is lvm2's calc_crc(INITIAL_CRC, b): the checksum of the label
// sector, of the metadata area header and of the metadata text.
func lvmCRC(b []byte) uint32 { return crcUpdate(initialCRC, b) }

// crcUpdate continues an lvm2 CRC over b; a wrapped metadata text is
// checksummed in its two pieces this way.
func crcUpdate(crc uint32, b []byte) uint32 {
	return ^crc32.Update(^crc, crc32.IEEETable, b)
}
