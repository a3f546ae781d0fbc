package tcp

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/transport"
)

// rogueDial connects to target as a member of the job (it holds the secret)
// claiming to be from, and returns the authenticated connection: a peer
// with a bug, or a compromised one.
func rogueDial(t *testing.T, target *Adapter, from, to transport.Addr) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", target.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	k := deriveKeys(testSecret)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := initiate(c, &k, hello{ringSlots: 64, from: from, to: to}, "test"); err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Time{})
	return c
}

func pkt(payload []byte) []byte {
	b := make([]byte, frameBase, frameBase+len(payload))
	putBase(b, fPacket, uint32(len(payload)))
	return append(b, payload...)
}

// A peer that sends what no correct peer sends (a truncated packet, an
// oversized one, garbage, frames of the wrong direction) loses its
// connection with a logged reason naming it; the target's link back to it
// fails with that reason; nothing else is touched, and healthy peers go on.
func TestBadPackets(t *testing.T) {
	garbage := make([]byte, 64)
	for i := range garbage {
		garbage[i] = byte(0x99 + i*17)
	}
	getRep := make([]byte, frameRep)
	putRep(getRep, fGetRep, statusOK, 0)
	reserved := make([]byte, frameBase)
	putBase(reserved, fPing, 0)
	reserved[2] = 7
	ackNoLink := make([]byte, frameBase+1) // an ack piggybacked toward a link rank 0 never opened
	putPacket(ackNoLink, 1, 1792)
	huge := make([]byte, frameRDMA)
	putRDMA(huge, fGet, 1, 0, 1<<41)
	cases := []struct {
		name  string
		send  []byte
		close bool
		says  string
	}{
		{"truncated", pkt(bytes.Repeat([]byte{1}, 1000))[:frameBase+500], true, "truncated"},
		{"oversized", func() []byte { b := make([]byte, frameBase); putBase(b, fPacket, 1<<30); return b }(), false, "oversized packet of 1073741824 bytes"},
		{"garbage", garbage, false, "unknown frame type 153"},
		{"reply to a target", getRep, false, "reply frame type 4 sent to the target"},
		{"reserved bytes", reserved, false, "reserved bytes set"},
		{"piggybacked ack of nothing", ackNoLink, false, "ack of 1792 packets on a link we never sent on"},
		{"huge request", huge, false, "RDMA request of 2199023255552 bytes"},
		{"good packets then garbage", append(append(pkt([]byte("one")), pkt([]byte("two"))...), garbage...), false, "unknown frame type 153"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ads, regs, log := newWorld(t, 3, Options{})
			ports := openAll(t, ads)
			mem := bytes.Repeat([]byte{0xEE}, 4096)
			if _, err := regs[0].Register(mem); err != nil {
				t.Fatal(err)
			}
			c := rogueDial(t, ads[0], addr(1, 0), addr(0, 0))
			c.Write(tc.send)
			if tc.close {
				c.(*net.TCPConn).CloseWrite()
			}
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			io.Copy(io.Discard, c) // until the target closes
			log.waitFor(t, tc.says)
			log.waitFor(t, "connection from rank 1 context 0")
			var col collector
			ports[0].Poll(&col, 64)
			if tc.name == "good packets then garbage" {
				if n := col.count(addr(1, 0)); n != 2 {
					t.Errorf("%d packets delivered before the garbage, want 2", n)
				}
			}
			var err error
			deadline := time.Now().Add(5 * time.Second)
			for err == nil && time.Now().Before(deadline) {
				var l *transport.Link
				if l, err = ports[0].Link(addr(1, 0)); err == nil {
					err = l.Err()
				}
				time.Sleep(time.Millisecond)
			}
			var pe *transport.PeerError
			if !errors.As(err, &pe) || pe.Addr.Rank != 1 || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("link back to the rogue: %v, want an error naming rank 1 that says %q", err, tc.says)
			}
			if tc.name != "truncated" && !errors.Is(err, transport.ErrCorrupt) {
				t.Errorf("%v does not wrap ErrCorrupt", err)
			}
			if !bytes.Equal(mem, bytes.Repeat([]byte{0xEE}, 4096)) {
				t.Fatal("registered memory changed")
			}
			exchange(t, ports[2], ports[0], addr(2, 0), addr(0, 0), 100)
			exchange(t, ports[0], ports[2], addr(0, 0), addr(2, 0), 100)
		})
	}
}

// readFrame reads one frame header (and a get reply's data) as an
// initiator.
func readFrame(t *testing.T, c net.Conn) (frame, []byte) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, frameBase)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatal(err)
	}
	if b[0] == fGetRep || b[0] == fPutRep {
		rest := make([]byte, frameRep-frameBase)
		if _, err := io.ReadFull(c, rest); err != nil {
			t.Fatal(err)
		}
		b = append(b, rest...)
	}
	f, err := parseFrame(b, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	// What the target did before it answered happens before this (the
	// adapter's own reads say so to the race detector; net.Conn's do not).
	raceAcquire()
	var data []byte
	if f.typ == fGetRep && f.u32 == statusOK {
		data = make([]byte, f.aux)
		if _, err := io.ReadFull(c, data); err != nil {
			t.Fatal(err)
		}
	}
	return f, data
}

// GET and PUT requests outside a region, or with a key that names none, are
// answered with an error status and touch nothing; the connection goes on
// and serves the next request. Nothing of the target's context is involved.
func TestRDMAOutsideRegion(t *testing.T) {
	ads, regs, log := newWorld(t, 2, Options{})
	openAll(t, ads)
	backing := bytes.Repeat([]byte{0xEE}, 3000)
	region := backing[1000:2000]
	for i := range region {
		region[i] = byte(i)
	}
	key, err := regs[0].Register(region)
	if err != nil {
		t.Fatal(err)
	}
	c := rogueDial(t, ads[0], addr(1, 0), addr(0, 0))
	req := func(typ uint8, k transport.Key, off, n uint64, data []byte) {
		b := make([]byte, frameRDMA)
		putRDMA(b, typ, uint64(k), off, n)
		raceReleaseMerge()
		c.Write(append(b, data...))
	}
	expect := func(what string, typ uint8, status uint32, aux uint64) []byte {
		t.Helper()
		f, data := readFrame(t, c)
		if f.typ != typ || f.u32 != status || (aux != ^uint64(0) && f.aux != aux) {
			t.Fatalf("%s: reply type %d status %d aux %d, want type %d status %d aux %d", what, f.typ, f.u32, f.aux, typ, status, aux)
		}
		return data
	}
	req(fGet, key, 901, 100, nil)
	expect("get past the end", fGetRep, statusBounds, 1000)
	req(fGet, key, ^uint64(0)-4, 10, nil)
	expect("get at an overflowing offset", fGetRep, statusBounds, 1000)
	req(fGet, key^(1<<30), 0, 10, nil)
	expect("get with a forged key", fGetRep, statusBadKey, 0)
	req(fPut, key, 950, 100, bytes.Repeat([]byte{0xCD}, 100))
	expect("put past the end", fPutRep, statusBounds, 1000)
	req(fPut, 0, 0, 5000, bytes.Repeat([]byte{0xCD}, 5000))
	expect("put with key zero", fPutRep, statusBadKey, 0)
	for i := range region {
		if region[i] != byte(i) {
			t.Fatalf("region byte %d changed", i)
		}
	}
	for i := 0; i < 1000; i++ {
		if backing[i] != 0xEE || backing[2000+i] != 0xEE {
			t.Fatal("memory outside the region changed")
		}
	}
	// The connection still serves.
	req(fPut, key, 10, 3, []byte{7, 8, 9})
	expect("put inside", fPutRep, statusOK, ^uint64(0))
	req(fGet, key, 5, 20, nil)
	got := expect("get inside", fGetRep, statusOK, 20)
	want := []byte{5, 6, 7, 8, 9, 7, 8, 9, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24}
	if !bytes.Equal(got, want) {
		t.Fatalf("get inside: %v, want %v", got, want)
	}
	if log.has("failed") {
		t.Fatal("a refused access failed the connection")
	}
}

// A target that breaks the protocol toward an initiator (acks for packets
// never sent, replies to no request) fails the initiator's link with an
// error naming it.
func TestBadTarget(t *testing.T) {
	ack := make([]byte, frameBase)
	putBase(ack, fAck, 5)
	rep := make([]byte, frameRep)
	putRep(rep, fPutRep, statusOK, 0)
	bye := make([]byte, frameBase)
	putBase(bye, fBye, 0)
	// A target may send packets back on the connection (its own link to
	// the initiator), but none larger than the initiator takes.
	big := make([]byte, frameBase)
	putPacket(big, 1<<30, 0)
	for _, tc := range []struct {
		name string
		send []byte
		is   error
		says string
	}{
		{"ack of nothing", ack, transport.ErrCorrupt, "ack of 5 packets, 0 unacknowledged"},
		{"reply to nothing", rep, transport.ErrCorrupt, "a reply to no request"},
		{"oversized packet back", big, transport.ErrCorrupt, "oversized packet"},
		{"goodbye", bye, transport.ErrClosed, "said goodbye"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ads, _, _ := newWorld(t, 2, Options{})
			openAll(t, ads)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				k := deriveKeys(testSecret)
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := respond(c, &k, 1, &nonceCache{}, "test", func(hello) uint8 { return verdictOK }); err != nil {
					return
				}
				c.SetDeadline(time.Time{})
				c.Write(tc.send)
				io.Copy(io.Discard, c)
			}()
			ads[0].mu.Lock()
			ads[0].peers[1] = ln.Addr().String()
			ads[0].mu.Unlock()
			p, _ := ads[0].Open(1, transport.NewDoorbell())
			l, err := p.Link(addr(1, 0))
			if err != nil {
				t.Fatal(err)
			}
			waitErr(t, l, p)
			var pe *transport.PeerError
			err = l.Err()
			if !errors.As(err, &pe) || pe.Addr.Rank != 1 || !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("link error %v, want %v naming rank 1 and saying %q", err, tc.is, tc.says)
			}
		})
	}
}
