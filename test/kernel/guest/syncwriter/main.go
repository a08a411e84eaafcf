//go:build linux

// Command syncwriter runs inside the kernel-test guest (test/kernel): it
// writes a stream of files into a directory on a mounted file system and
// says what is durable, so that a test can kill the block device's server
// in the middle and check afterwards that nothing durable was lost.
//
// Round i creates the file fNNNN (1 byte to 128 KiB of pseudo-random
// data), fsyncs it and the directory, and prints
//
//	@@F fNNNN SIZE SHA256
//
// then appends record i (Record) to log.bin, fsyncs it and prints
//
//	@@A N
//
// meaning the first N records of log.bin are durable. Each line is printed
// only after its fsyncs returned. At the first error it prints "@@X ..."
// and exits 2; after -n rounds it exits 0.
//
// It is built with CGO_ENABLED=0 so that it runs in the busybox initramfs.
package main

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// RecordSize is the size of one log.bin record.
const RecordSize = 4096

// Record is log record i: 512 little-endian words i<<32 | j. The test
// (nbd_test.go) rebuilds it the same way.
func Record(i int) []byte {
	b := make([]byte, RecordSize)
	for j := 0; j < RecordSize/8; j++ {
		binary.LittleEndian.PutUint64(b[8*j:], uint64(i)<<32|uint64(j))
	}
	return b
}

func main() {
	dir := flag.String("dir", "", "directory to write into (created)")
	n := flag.Int("n", 1000, "rounds")
	seed := flag.Uint64("seed", 1, "seed of the file contents")
	flag.Parse()
	if err := run(*dir, *n, *seed); err != nil {
		fmt.Printf("@@X %v\n", err)
		os.Exit(2)
	}
}

func run(dir string, n int, seed uint64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	// The directory's own entry in its parent must be durable too.
	if err := syncDir(filepath.Dir(dir)); err != nil {
		return err
	}
	log, err := os.OpenFile(filepath.Join(dir, "log.bin"), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	if err := log.Sync(); err != nil {
		return fmt.Errorf("fsync log.bin: %w", err)
	}
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	for i := 0; i < n; i++ {
		data := make([]byte, 1+r.IntN(128<<10))
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		name := fmt.Sprintf("f%04d", i)
		if err := writeFile(filepath.Join(dir, name), data); err != nil {
			return err
		}
		if err := d.Sync(); err != nil {
			return fmt.Errorf("fsync %s after %s: %w", dir, name, err)
		}
		sum := sha256.Sum256(data)
		fmt.Printf("@@F %s %d %s\n", name, len(data), hex.EncodeToString(sum[:]))
		if _, err := log.Write(Record(i)); err != nil {
			return fmt.Errorf("append record %d: %w", i, err)
		}
		if err := log.Sync(); err != nil {
			return fmt.Errorf("fsync log.bin after record %d: %w", i, err)
		}
		fmt.Printf("@@A %d\n", i+1)
	}
	return nil
}

func writeFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}
