package token

import "fmt"

// hidDescriptorIsFIDO reports whether a HID report descriptor declares
// a top-level application collection of usage page 0xF1D0 (FIDO
// Alliance), usage 1 (CTAPHID): what libfido2 looks for too. It walks
// the descriptor's short items (HID 1.11 §6.2.2.2); a malformed
// descriptor is an error.
func hidDescriptorIsFIDO(rd []byte) (bool, error) {
	var page, usage uint32
	depth := 0
	for i := 0; i < len(rd); {
		prefix := rd[i]
		if prefix == 0xfe { // long item: size in the next byte
			if i+2 >= len(rd) {
				return false, fmt.Errorf("%w: truncated long item in the HID report descriptor", ErrFIDO2Device)
			}
			i += 3 + int(rd[i+1])
			continue
		}
		size := int(prefix & 3)
		if size == 3 {
			size = 4
		}
		if i+1+size > len(rd) {
			return false, fmt.Errorf("%w: truncated item in the HID report descriptor", ErrFIDO2Device)
		}
		var v uint32
		for j := size - 1; j >= 0; j-- {
			v = v<<8 | uint32(rd[i+1+j])
		}
		i += 1 + size
		switch prefix &^ 3 {
		case 0x04: // global: usage page
			page = v
		case 0x08: // local: usage (32-bit: page in the high half)
			usage = v
			if size == 4 {
				page, usage = v>>16, v&0xffff
			}
		case 0xa0: // main: collection
			if depth == 0 && v == 1 && page == 0xf1d0 && usage == 1 {
				return true, nil
			}
			depth++
		case 0xc0: // main: end collection
			if depth > 0 {
				depth--
			}
		}
	}
	return false, nil
}
