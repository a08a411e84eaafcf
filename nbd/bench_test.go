package nbd

import (
	"bufio"
	"fmt"
	"io"
	"testing"
	"time"
)

// benchIO drives one connection over loopback TCP with a raw, allocation-
// free client keeping `depth` requests in flight, so allocs/op measures the
// server's steady state.
func benchIO(b *testing.B, typ uint16, n int, structured bool, depth int) {
	const size = 64 << 20
	ts := startServer(b, newMem(size, 512), Options{})
	c := ts.conn(b)
	o := newOptClient(b, c, flagCFixedNewstyle|flagCNoZeroes)
	if structured {
		o.expect(b, optStructuredReply, nil, repAck)
	}
	o.expect(b, optGo, goData("", infoBlockSize), repAck)
	c.SetDeadline(time.Time{})
	br := bufio.NewReaderSize(io.MultiReader(o.br, c), 256<<10)

	req := make([]byte, requestHeaderLen+n)
	be.PutUint32(req[0:], requestMagic)
	be.PutUint16(req[6:], typ)
	be.PutUint32(req[24:], uint32(n))
	if typ != cmdWrite {
		req = req[:requestHeaderLen]
	}
	replyLen := simpleReplyLen
	if typ == cmdRead {
		replyLen += n
		if structured {
			replyLen += structuredHeaderLen + 8 - simpleReplyLen
		}
	}
	reply := make([]byte, replyLen)
	tokens := make(chan struct{}, depth)
	errc := make(chan error, 1)

	b.SetBytes(int64(n))
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		for range b.N {
			if _, err := io.ReadFull(br, reply); err != nil {
				errc <- err
				return
			}
			if m := be.Uint32(reply); m != simpleMagic && m != structuredMagic {
				errc <- fmt.Errorf("bad reply magic %#x", m)
				return
			}
			<-tokens
		}
		errc <- nil
	}()
	for i := range b.N {
		tokens <- struct{}{}
		be.PutUint64(req[8:], uint64(i))
		be.PutUint64(req[16:], uint64(i*n)%(size-uint64(n)+1)/512*512)
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	c.Close()
}

func BenchmarkRead4K(b *testing.B)             { benchIO(b, cmdRead, 4096, false, 16) }
func BenchmarkRead4KStructured(b *testing.B)   { benchIO(b, cmdRead, 4096, true, 16) }
func BenchmarkWrite4K(b *testing.B)            { benchIO(b, cmdWrite, 4096, false, 16) }
func BenchmarkRead256KStructured(b *testing.B) { benchIO(b, cmdRead, 256<<10, true, 8) }
func BenchmarkWrite256K(b *testing.B)          { benchIO(b, cmdWrite, 256<<10, false, 8) }
func BenchmarkRead4KQD1(b *testing.B)          { benchIO(b, cmdRead, 4096, false, 1) }

// BenchmarkNbdcopy measures real-client throughput: nbdcopy (libnbd-bin)
// copying 256 MiB into and out of an in-memory export over loopback TCP
// with multi-conn.
func BenchmarkNbdcopy(b *testing.B) {
	nbdcopy := requireTool(b, "nbdcopy", "libnbd-bin")
	const size = 256 << 20
	dir := b.TempDir()
	src := dir + "/src.img"
	writeRandomFile(b, src, size)
	out := dir + "/out.img"
	ts := startServer(b, newMem(size, 4096), Options{MultiConn: true})
	for _, dirn := range []string{"in", "out"} {
		b.Run(dirn, func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				if dirn == "in" {
					mustRun(b, 5*time.Minute, nbdcopy, src, ts.uri())
				} else {
					mustRun(b, 5*time.Minute, nbdcopy, ts.uri(), out)
				}
			}
		})
	}
}
