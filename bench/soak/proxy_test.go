package main

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// echo serves connections that send back what they read, and reports each
// connection's end (nil: end of file) on ends.
func echo(t *testing.T) (addr string, ends chan error) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ends = make(chan error, 8)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, err := io.Copy(c, c)
				ends <- err
			}()
		}
	}()
	return l.Addr().String(), ends
}

func proxied(t *testing.T) (*Proxy, net.Conn, chan error) {
	t.Helper()
	addr, ends := echo(t)
	p, err := NewProxy("127.0.0.1:0", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return p, c, ends
}

// roundTrip writes b and reads it back within 5s.
func roundTrip(t *testing.T, c net.Conn, b []byte) time.Duration {
	t.Helper()
	start := time.Now()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(b))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != string(b) {
		t.Fatal("the proxy changed the data")
	}
	return time.Since(start)
}

// Latency delays each direction; bandwidth paces it.
func TestProxyToxics(t *testing.T) {
	p, c, _ := proxied(t)
	if d := roundTrip(t, c, []byte("warm")); d > time.Second {
		t.Fatalf("round trip without toxics took %v", d)
	}
	p.SetToxics(Toxics{Latency: 40 * time.Millisecond})
	if d := roundTrip(t, c, []byte("slow")); d < 80*time.Millisecond {
		t.Fatalf("round trip with 40ms latency each way took %v", d)
	}
	p.SetToxics(Toxics{Bandwidth: 1 << 20})
	if d := roundTrip(t, c, make([]byte, 256<<10)); d < 220*time.Millisecond {
		t.Fatalf("256 KiB at 1 MiB/s (each direction paced on its own) took %v", d)
	}
	// The counter moves once a write returned, which may be after the
	// dialer read the bytes.
	want := int64(2*(256<<10) + 2*len("warm") + 2*len("slow"))
	for deadline := time.Now().Add(5 * time.Second); p.Bytes.Load() < want && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if p.Accepted.Load() != 1 || p.Bytes.Load() != want {
		t.Fatalf("accepted %d, forwarded %d bytes", p.Accepted.Load(), p.Bytes.Load())
	}
}

// A stall forwards nothing while it lasts, and everything after.
func TestProxyStall(t *testing.T) {
	p, c, _ := proxied(t)
	roundTrip(t, c, []byte("before"))
	p.Stall(300 * time.Millisecond)
	if d := roundTrip(t, c, []byte("during")); d < 250*time.Millisecond {
		t.Fatalf("a round trip during a 300ms stall took %v", d)
	}
}

// A half-close gives the target end of file while the dialer's connection
// stays open; a reset gives the dialer a connection reset.
func TestProxyHalfCloseReset(t *testing.T) {
	p, c, ends := proxied(t)
	roundTrip(t, c, []byte("hello"))
	if n := p.HalfClose(); n != 1 {
		t.Fatalf("half-closed %d connections, want 1", n)
	}
	select {
	case err := <-ends:
		if err != nil {
			t.Fatalf("the target read %v, want end of file", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the target never read end of file")
	}

	p2, c2, _ := proxied(t)
	roundTrip(t, c2, []byte("hello"))
	if n := p2.Reset(); n != 1 {
		t.Fatalf("reset %d connections, want 1", n)
	}
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c2.Read(make([]byte, 1))
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the dialer read %v, want a connection reset", err)
	}
}
