package tcrypt

import (
	"fmt"
	"hash/crc32"
	"io"
	"os"
)

// Key pool sizes and the key-file limit (TrueCrypt's and cryptsetup's).
const (
	PoolLen         = 64      // TrueCrypt pool and passphrase limit
	PoolLenVera     = 128     // VeraCrypt, when the passphrase is longer than 64 bytes
	MaxKeyfileBytes = 1 << 20 // only the first 1 MiB of a key file counts
)

// mixKeyfile adds one key file to the pool as TrueCrypt does: a running
// CRC-32 register (IEEE polynomial, started at all ones, never inverted)
// is updated with each byte, and its four bytes, most significant first,
// are added to the next four pool bytes, wrapping at the pool length.
func mixKeyfile(pool []byte, data []byte) {
	crc := ^uint32(0)
	j := 0
	for _, b := range data {
		crc = crc32.IEEETable[byte(crc)^b] ^ crc>>8
		pool[j] += byte(crc >> 24)
		pool[j+1] += byte(crc >> 16)
		pool[j+2] += byte(crc >> 8)
		pool[j+3] += byte(crc)
		j = (j + 4) % len(pool)
	}
}

// ReadKeyfile reads the part of a key file that counts (its first MiB).
func ReadKeyfile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot open key file: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return nil, fmt.Errorf("%w: key file %s is a directory", ErrInvalid, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxKeyfileBytes))
	if err != nil {
		clear(b)
		return nil, fmt.Errorf("error reading key file %s: %w", path, err)
	}
	return b, nil
}

// Secret combines a passphrase with key files into the PBKDF password, as
// cryptsetup's TCRYPT_init_hdr does. Without key files the password is the
// passphrase. With them it is the whole pool: 64 bytes, or 128 when VeraCrypt
// is allowed and the passphrase is longer than 64 bytes; the key files are
// mixed in first and the passphrase bytes are added on top. A passphrase
// longer than the pool is refused. The caller should clear the result.
func Secret(passphrase []byte, keyfiles [][]byte, veraCrypt bool) ([]byte, error) {
	max := PoolLen
	if veraCrypt && len(passphrase) > PoolLen {
		max = PoolLenVera
	}
	if len(passphrase) > max {
		return nil, fmt.Errorf("%w: maximum TCRYPT passphrase length (%d) exceeded", ErrInvalid, max)
	}
	pool := make([]byte, max)
	for _, k := range keyfiles {
		mixKeyfile(pool, k)
	}
	for i, c := range passphrase {
		pool[i] += c
	}
	if len(keyfiles) == 0 {
		pool = pool[:len(passphrase)]
	}
	return pool, nil
}
