package nbd

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/blkcrypt/blkcrypt"
	"github.com/blkcrypt/blkcrypt/sector"
)

// durDev is a slow in-memory device that models durability: Sync keeps a
// copy of what was written when it began, and only that copy survives.
// It is a blkcrypt.Device, and through durBackend an NBD Backend.
type durDev struct {
	mu      sync.Mutex
	data    []byte
	durable []byte
	syncs   int
	writing atomic.Int64 // WriteAt calls under way
	rnd     atomic.Uint64
}

func newDurDev(size int) *durDev {
	return &durDev{data: make([]byte, size), durable: make([]byte, size)}
}

func (d *durDev) pause() {
	time.Sleep(time.Duration(d.rnd.Add(0x9e3779b97f4a7c15)>>33) % (300 * time.Microsecond))
}

func (d *durDev) ReadAt(p []byte, off int64) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return copy(p, d.data[off:]), nil
}

func (d *durDev) WriteAt(p []byte, off int64) (int, error) {
	d.writing.Add(1)
	defer d.writing.Add(-1)
	d.pause()
	d.mu.Lock()
	defer d.mu.Unlock()
	return copy(d.data[off:], p), nil
}

func (d *durDev) Sync() error {
	d.mu.Lock()
	d.syncs++
	copy(d.durable, d.data)
	d.mu.Unlock()
	d.pause()
	return nil
}

func (d *durDev) Close() error { return nil }

func (d *durDev) syncsBegun() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.syncs
}

type durBackend struct{ *durDev }

func (b durBackend) Size() int64    { return int64(len(b.data)) }
func (b durBackend) Flush() error   { return b.Sync() }
func (b durBackend) BlockSize() int { return 512 }

// recListener wraps accepted connections so that every reply the server
// writes is stamped with the number of syncs the device had begun.
type recListener struct {
	net.Listener
	dev *durDev

	mu     sync.Mutex
	stamps []int
}

func (l *recListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &recConn{Conn: c, l: l}, nil
}

type recConn struct {
	net.Conn
	l *recListener
}

// CloseWrite is the TCP connection's, so the server can close gently.
func (c *recConn) CloseWrite() error { return c.Conn.(*net.TCPConn).CloseWrite() }

func (c *recConn) Write(p []byte) (int, error) {
	s := c.l.dev.syncsBegun()
	c.l.mu.Lock()
	c.l.stamps = append(c.l.stamps, s)
	c.l.mu.Unlock()
	return c.Conn.Write(p)
}

// TestShutdownNoAckAfterFinalFlush: clients keep many writes (some FUA) and
// flushes in flight on a slow device while Shutdown is called. Afterwards
// the server wrote nothing to any client once the final flush had begun;
// every request either succeeded or died with its connection (no error
// replies); and the durable copy holds exactly the acknowledged writes: a
// write that was done but whose reply never reached the client (as when a
// reset at close made the client's kernel drop it) fails the test too. With a
// blkcrypt.Volume as the backend, closed after Shutdown as `blkcrypt serve`
// does, the durable copy is reopened with the same key and checked the
// same way.
func TestShutdownNoAckAfterFinalFlush(t *testing.T) {
	for _, backend := range []string{"mem", "volume"} {
		t.Run(backend, func(t *testing.T) { shutdownRounds(t, backend) })
	}
}

func shutdownRounds(t *testing.T, backend string) {
	const (
		clients = 3
		lanes   = 5 // per client, each owning a region
		region  = 32 << 10
		size    = clients * lanes * region
	)
	key := make([]byte, 64)
	rand.Read(key)
	newVolume := func(dev blkcrypt.Device) *blkcrypt.Volume {
		c, err := sector.New("aes-xts-plain64", bytes.Clone(key), sector.Options{})
		if err != nil {
			t.Fatal(err)
		}
		v, err := blkcrypt.NewVolume(dev, c, 0, size, false)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	var acked, died, writingAtShutdown int64
	for round := range 6 {
		dev := newDurDev(size)
		var b Backend = durBackend{dev}
		var vol *blkcrypt.Volume
		if backend == "volume" {
			vol = newVolume(dev)
			if err := vol.WriteZeroes(0, size); err != nil {
				t.Fatal(err)
			}
			b = vol
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		rl := &recListener{Listener: l, dev: dev}
		s := NewServer(b, Options{MultiConn: true})
		served := make(chan error, 1)
		go func() { served <- s.Serve(context.Background(), rl) }()

		shadow := make([]byte, size) // acknowledged writes
		// Each lane's last write that got no reply, to tell a lost reply
		// (the write landed, the client never heard) from a lost write.
		pending := make([][2]int, clients*lanes)
		pendData := make([][]byte, clients*lanes)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var firstErr error
		fail := func(err error) {
			mu.Lock()
			if firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
		}
		var ready sync.WaitGroup
		for ci := range clients {
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			cl := dial(t, c, dialOpts{structured: ci%2 == 0})
			for lane := range lanes {
				wg.Add(1)
				ready.Add(1)
				markReady := sync.OnceFunc(ready.Done)
				go func() {
					defer wg.Done()
					defer markReady()
					id := ci*lanes + lane
					base := id * region
					r := mrand.New(mrand.NewPCG(uint64(round), uint64(id)))
					for i := 0; ; i++ {
						if i == 2 {
							markReady() // a few requests went through
						}
						var p *call
						var data []byte
						var off int
						if r.IntN(8) == 0 {
							p = cl.start(reqArgs{typ: cmdFlush})
						} else {
							off = r.IntN(region/512) * 512
							n := (1 + r.IntN(min((region-off)/512, 24))) * 512
							data = make([]byte, n)
							for k := range data {
								data[k] = byte(r.Uint32())
							}
							var flags uint16
							if r.IntN(4) == 0 {
								flags = cmdFlagFUA
							}
							mu.Lock()
							pending[id] = [2]int{base + off, len(data)}
							pendData[id] = data
							mu.Unlock()
							p = cl.start(reqArgs{typ: cmdWrite, flags: flags, off: uint64(base + off), payload: data})
						}
						select {
						case <-p.done:
						case <-time.After(30 * time.Second):
							fail(fmt.Errorf("lane %d: no reply and no close within 30s", id))
							return
						}
						if p.err != nil { // the connection went: the request died cleanly
							c.Close() // as a client does once the server has gone
							atomic.AddInt64(&died, 1)
							return
						}
						if p.errno != 0 {
							fail(fmt.Errorf("lane %d: request failed with NBD error %d (%s)", id, p.errno, p.msg))
							return
						}
						if data != nil {
							mu.Lock()
							copy(shadow[base+off:], data)
							pendData[id] = nil
							mu.Unlock()
							atomic.AddInt64(&acked, 1)
						}
					}
				}()
			}
		}
		ready.Wait()
		time.Sleep(time.Duration(mrand.IntN(2000)) * time.Microsecond)
		writingAtShutdown += dev.writing.Load()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		if err := s.Shutdown(ctx); err != nil {
			t.Fatalf("round %d: Shutdown: %v", round, err)
		}
		cancel()
		// Every request has finished: what the final flush made durable is
		// what a power cut now would leave.
		dev.mu.Lock()
		final := dev.syncs
		durable := bytes.Clone(dev.durable)
		dev.mu.Unlock()
		wg.Wait()
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
		if firstErr != nil {
			t.Fatalf("round %d: %v", round, firstErr)
		}
		rl.mu.Lock()
		late := 0
		for _, s := range rl.stamps {
			if s >= final {
				late++
			}
		}
		rl.mu.Unlock()
		if late > 0 {
			t.Fatalf("round %d: %d replies written after the final flush began", round, late)
		}
		got := durable
		if vol != nil {
			if err := vol.Close(); err != nil {
				t.Fatalf("Volume.Close after Shutdown: %v", err)
			}
			re := newVolume(&durDev{data: durable, durable: make([]byte, size)})
			got = make([]byte, size)
			if _, err := re.ReadAt(got, 0); err != nil {
				t.Fatal(err)
			}
			re.Close()
		}
		for id := range clients * lanes {
			lo, hi := id*region, (id+1)*region
			if bytes.Equal(got[lo:hi], shadow[lo:hi]) {
				continue
			}
			if pendData[id] != nil {
				alt := bytes.Clone(shadow[lo:hi])
				copy(alt[pending[id][0]-lo:], pendData[id])
				if bytes.Equal(got[lo:hi], alt) {
					t.Errorf("round %d lane %d: a write the client saw fail had been done: its reply was lost (a reset at close?)", round, id)
					continue
				}
			}
			t.Errorf("round %d lane %d: the durable copy lacks acknowledged writes", round, id)
		}
	}
	t.Logf("%d writes acknowledged, %d requests died with their connection, %d device writes under way at Shutdown", acked, died, writingAtShutdown)
	if acked == 0 || died == 0 || writingAtShutdown == 0 {
		t.Errorf("Shutdown did not race the clients: %d acknowledged, %d died, %d writing", acked, died, writingAtShutdown)
	}
}
