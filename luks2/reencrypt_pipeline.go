package luks2

import "github.com/blkcrypt/blkcrypt/internal/luksutil"

// The offline run's read-ahead: while one hotzone is encrypted, written
// and committed, a goroutine reads the next one, computes its resilience
// data from the old ciphertext and decrypts it, so reading and decryption
// overlap the writes, syncs and commits of the step before (the sector
// engine shares each batch between both cores as well).

// preparedChunk is one hotzone read and decrypted ahead of its turn.
type preparedChunk struct {
	off   uint64
	prot  []byte // resilience data (checksums, or the journal: the old ciphertext)
	plain []byte // the hotzone decrypted with the old key
	err   error
}

// resilienceData is what protect writes for raw, the old ciphertext:
// the checksums of its blocks, raw itself for a journal, nil for none.
func (r *reenc) resilienceData(raw []byte) []byte {
	switch r.resilience {
	case "checksum":
		hf, _ := hashByName(r.hash)
		var sums []byte
		for i := 0; i+r.block <= len(raw); i += r.block {
			hh := hf()
			hh.Write(raw[i : i+r.block])
			sums = hh.Sum(sums)
		}
		return sums
	case "journal":
		return raw
	}
	return nil
}

// writeResilience writes and syncs the resilience data of a hotzone.
func (r *reenc) writeResilience(dev Device, prot []byte) error {
	if prot == nil {
		return nil
	}
	return luksutil.WriteSync(dev, prot, int64(r.areaOff))
}

// readAhead sends each hotzone from start on, prepared, until the end, a
// read error or stop. The ranges it reads are not written until their
// turn, so what it reads is the old ciphertext.
func (r *reenc) readAhead(data Device, start, hz uint64, next chan<- preparedChunk, stop <-chan struct{}) {
	for off := start; off < r.size; {
		n := min(hz, r.size-off)
		raw := make([]byte, n)
		c := preparedChunk{off: off}
		if _, c.err = readFull(data, raw, int64(r.dataOff+off)); c.err == nil {
			c.prot = r.resilienceData(raw)
			c.plain = raw
			if r.resilience == "journal" {
				// The journal is the ciphertext itself: decrypt a copy.
				c.plain = append([]byte(nil), raw...)
			}
			c.err = r.oldC.DecryptSectors(c.plain, c.plain, off/512)
		}
		select {
		case next <- c:
		case <-stop:
			clear(c.plain)
			return
		}
		if c.err != nil {
			return
		}
		off += n
	}
	close(next)
}
