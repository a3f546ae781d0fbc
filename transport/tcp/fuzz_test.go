package tcp

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/internal/ring"
	"github.com/amigo-hpc/amigo/transport"
)

// Every decoder of the adapter has a fuzz target seeded with valid
// encodings: frame headers, the handshake's messages (and both sides of the
// handshake run against arbitrary bytes), and whole streams fed to a
// target's read side and to an initiator's.

func frameSeeds() [][]byte {
	var out [][]byte
	b := make([]byte, frameRDMA)
	putBase(b, fPacket, 5)
	out = append(out, append(bytes.Clone(b[:frameBase]), "hello"...))
	putPacket(b, 2, 300) // with a piggybacked ack
	out = append(out, append(bytes.Clone(b[:frameBase]), "hi"...))
	putRDMA(b, fGet, 0x1234, 10, 100)
	out = append(out, bytes.Clone(b))
	putRDMA(b, fPut, 0x1234, 10, 3)
	out = append(out, append(bytes.Clone(b), 1, 2, 3))
	r := make([]byte, frameRep)
	putRep(r, fGetRep, statusOK, 2)
	out = append(out, append(bytes.Clone(r), 9, 9))
	putRep(r, fPutRep, statusBounds, 1000)
	out = append(out, bytes.Clone(r))
	for _, typ := range []uint8{fPing, fBye} {
		putBase(b, typ, 0)
		out = append(out, bytes.Clone(b[:frameBase]))
	}
	putBase(b, fAck, 3)
	out = append(out, bytes.Clone(b[:frameBase]))
	a := make([]byte, frameAtomic)
	putAtomic(a, &transport.RDMAOp{Kind: transport.Atomic, AOp: transport.AtomicCAS, Width: 8, Key: 0x1234, Off: 16, Operand: 7, Compare: 3})
	out = append(out, bytes.Clone(a))
	putAtomic(a, &transport.RDMAOp{Kind: transport.Atomic, AOp: transport.AtomicAdd, Width: 4, Key: 0x1234, Off: 4, Operand: 1})
	out = append(out, bytes.Clone(a))
	putRep(r, fAtomicRep, statusOK, 42)
	out = append(out, bytes.Clone(r))
	putRep(r, fAtomicRep, statusPerm, 0)
	out = append(out, bytes.Clone(r))
	return out
}

func FuzzParseFrame(f *testing.F) {
	for _, s := range frameSeeds() {
		f.Add(s, true, 1000)
		f.Add(s, false, 1000)
		f.Add(s[:len(s)/2], false, 10)
	}
	f.Fuzz(func(t *testing.T, b []byte, initiator bool, maxPacket int) {
		fr, err := parseFrame(b, initiator, maxPacket)
		if err != nil {
			return
		}
		if fr.headerLength > len(b) || fr.headerLength < frameBase {
			t.Fatalf("header of %d bytes from %d", fr.headerLength, len(b))
		}
		if fr.typ != fPacket && fr.typ != fAtomic && b[1]|b[2]|b[3] != 0 {
			t.Fatal("accepted a frame with reserved bytes set")
		}
		switch fr.typ {
		case fPacket:
			if int64(fr.u32) > int64(maxPacket) || initiator {
				t.Fatal("accepted a packet it should refuse")
			}
			again := make([]byte, frameBase)
			putPacket(again, int(fr.u32), uint64(fr.ack))
			if !bytes.Equal(again, b[:frameBase]) || fr.ack > maxPiggyback {
				t.Fatal("packet header does not round-trip")
			}
		case fGet, fPut:
			if fr.n > maxWireRDMA || initiator {
				t.Fatal("accepted a request it should refuse")
			}
			again := make([]byte, frameRDMA)
			putRDMA(again, fr.typ, fr.key, fr.off, fr.n)
			if !bytes.Equal(again, b[:frameRDMA]) {
				t.Fatal("request does not round-trip")
			}
		case fAtomic:
			if initiator || transport.CheckAtomic(fr.aop, int(fr.width)) != nil || fr.n != uint64(fr.width) {
				t.Fatal("accepted an atomic it should refuse")
			}
			again := make([]byte, frameAtomic)
			putAtomic(again, &transport.RDMAOp{AOp: fr.aop, Width: fr.width, Key: transport.Key(fr.key), Off: fr.off, Operand: fr.arg, Compare: fr.cmp})
			if !bytes.Equal(again, b[:frameAtomic]) {
				t.Fatal("atomic does not round-trip")
			}
		case fGetRep, fPutRep, fAtomicRep:
			if !initiator || fr.u32 > statusMax {
				t.Fatal("accepted a reply it should refuse")
			}
		case fAck:
			if !initiator || fr.u32 == 0 {
				t.Fatal("accepted an ack it should refuse")
			}
		}
	})
}

func FuzzParseHandshake(f *testing.F) {
	h := hello{version: handshakeVersion, ringSlots: 1024, from: addr(1, 2), to: addr(3, 4)}
	f.Add(h.append(nil))
	var a answer
	f.Add(a.append(nil))
	f.Add(make([]byte, verdictSize))
	f.Add([]byte("AMIGOTCP"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if h, err := parseHello(b); err == nil {
			if !bytes.Equal(h.append(nil), b[:helloSize]) {
				t.Fatal("hello does not round-trip")
			}
			if h.ringSlots < 2 || h.ringSlots > ring.MaxSlots || h.from.Rank < 0 || h.to.Context > maxContexts {
				t.Fatal("accepted a hello it should refuse")
			}
		}
		if a, err := parseAnswer(b); err == nil && !bytes.Equal(a.append(nil), b[:answerSize]) {
			t.Fatal("answer does not round-trip")
		}
		if v, err := parseVerdict(b); err == nil && v > verdictMax {
			t.Fatal("accepted an unknown verdict")
		}
	})
}

// FuzzRespond runs the target's side of the handshake against arbitrary
// bytes: it must refuse them (nobody without the secret gets in), without
// panicking or hanging.
func FuzzRespond(f *testing.F) {
	k := deriveKeys(testSecret)
	h := hello{version: handshakeVersion, ringSlots: 64, from: addr(1, 0), to: addr(0, 0), tag: k.tag}
	hb := h.append(nil)
	f.Add(hb)
	f.Add(append(bytes.Clone(hb), make([]byte, proofSize)...))
	f.Add([]byte("AMIGOTCP garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tc, ic := net.Pipe()
		defer tc.Close()
		go func() {
			ic.Write(b)
			ic.Close()
		}()
		go func() {
			// Drain the answer.
			buf := make([]byte, 256)
			for {
				if _, err := ic.Read(buf); err != nil {
					return
				}
			}
		}()
		tc.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := respond(tc, &k, 0, &nonceCache{}, "fuzz", func(hello) uint8 { return verdictOK }); err == nil {
			t.Fatal("a handshake without the secret's proof was accepted")
		}
	})
}

// FuzzInitiate runs the initiator's side against an arbitrary target.
func FuzzInitiate(f *testing.F) {
	var a answer
	f.Add(append(a.append(nil), make([]byte, verdictSize)...))
	f.Add([]byte("AMIGOTCP"))
	k := deriveKeys(testSecret)
	f.Fuzz(func(t *testing.T, b []byte) {
		ic, tc := net.Pipe()
		defer ic.Close()
		go func() {
			buf := make([]byte, helloSize)
			tc.Read(buf)
			tc.Write(b)
			tc.Close()
		}()
		ic.SetDeadline(time.Now().Add(2 * time.Second))
		if err := initiate(ic, &k, hello{ringSlots: 64, from: addr(0, 0), to: addr(1, 0)}, "fuzz"); err == nil {
			t.Fatal("a target without the secret's proof was believed")
		}
	})
}

// streamRig is a target adapter with a registered region between guards,
// to which fuzz streams arrive as authenticated connections from ever new
// contexts of rank 1.
type streamRig struct {
	ads     []*Adapter
	ports   []transport.Port
	backing []byte
	next    int32
}

func newStreamRig(t testing.TB) *streamRig {
	ads, regs, _ := newWorld(t, 2, Options{Logf: func(string, ...any) {}})
	r := &streamRig{ads: ads, ports: openAll(t, ads), backing: bytes.Repeat([]byte{0xEE}, 3<<10)}
	if _, err := regs[0].Register(r.backing[1<<10 : 2<<10]); err != nil {
		t.Fatal(err)
	}
	return r
}

// feed delivers stream to the target as the bytes of a connection of a job
// member, then closes it, and polls until the target is done with it.
func (r *streamRig) feed(t testing.TB, stream []byte) {
	r.next++
	from := addr(1, int(r.next%maxContexts))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ic, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer ic.Close()
	tc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	a := r.ads[0]
	a.mu.Lock()
	p := a.ports[0]
	p.adoptLocked(pendingConn{h: hello{ringSlots: 64, from: from, to: addr(0, 0)}, nc: tc.(*net.TCPConn), remote: "fuzz"})
	a.mu.Unlock()
	var c *conn
	for _, x := range p.list(&p.ins) {
		if x.peer == from {
			c = x
		}
	}
	if c == nil {
		t.Fatal("connection not adopted")
	}
	go func() {
		ic.Write(stream)
		ic.(*net.TCPConn).CloseWrite()
		buf := make([]byte, 64<<10)
		for {
			if _, err := ic.Read(buf); err != nil {
				return
			}
		}
	}()
	var col collector
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-c.finished:
			r.ports[0].Poll(&col, 1<<20)
			for i, b := range r.backing {
				if (i < 1<<10 || i >= 2<<10) && b != 0xEE {
					t.Fatalf("byte %d outside the region changed", i)
				}
			}
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the target did not finish a connection closed by its peer (stalled %v)", c.stalled.Load())
		}
		r.ports[0].Poll(&col, 64)
		r.ports[0].Progress()
	}
}

// FuzzTargetStream feeds whole streams to a target's read side. Each input
// costs a TCP connection; run it with a short -fuzzminimizetime (50x), or
// the minimization of each new input takes most of the time.
func FuzzTargetStream(f *testing.F) {
	var all []byte
	for _, s := range frameSeeds() {
		if s[0] == fPacket || s[0] == fGet || s[0] == fPut || s[0] == fPing || s[0] == fAtomic {
			f.Add(s)
			all = append(all, s...)
		}
	}
	f.Add(all)
	f.Add(bytes.Repeat(pkt(bytes.Repeat([]byte{7}, 1000)), 20))
	rig := newStreamRig(f)
	f.Fuzz(func(t *testing.T, stream []byte) {
		rig.feed(t, stream)
	})
}

// FuzzInitiatorStream feeds whole streams, as a target's answers, to an
// initiator that has packets, GETs and PUTs in flight: whatever comes, the
// link fails or works, its descriptors all complete, and nothing is written
// outside the GETs' buffers. Run it with a short -fuzzminimizetime.
func FuzzInitiatorStream(f *testing.F) {
	ack := make([]byte, frameBase)
	putBase(ack, fAck, 2)
	rep := make([]byte, frameRep)
	putRep(rep, fGetRep, statusOK, 4)
	good := append(append(bytes.Clone(ack), rep...), 1, 2, 3, 4)
	putRep(rep, fPutRep, statusOK, 0)
	good = append(good, rep...)
	f.Add(good)
	f.Add(ack)
	putRep(rep, fGetRep, statusBounds, 100)
	f.Add(bytes.Clone(rep))
	ads, _, _ := newWorld(f, 2, Options{Logf: func(string, ...any) {}})
	openAll(f, ads)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	defer ln.Close()
	ads[0].mu.Lock()
	ads[0].peers[1] = ln.Addr().String()
	ads[0].mu.Unlock()
	k := deriveKeys(testSecret)
	ctx := 0
	f.Fuzz(func(t *testing.T, stream []byte) {
		ctx++
		p, err := ads[0].Open(ctx, transport.NewDoorbell())
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		l, err := p.Link(addr(1, 0))
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan struct{})
		go func() {
			defer close(served)
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := respond(c, &k, 1, &nonceCache{}, "fuzz", func(hello) uint8 { return verdictOK }); err != nil {
				return
			}
			c.Write(stream)
		}()
		pr := &producer{l: l}
		pr.send([]byte("one"))
		pr.send([]byte("two"))
		backing := bytes.Repeat([]byte{0xEE}, 300)
		ops := []struct {
			kind transport.RDMAKind
			buf  []byte
		}{{transport.Get, backing[100:104]}, {transport.Put, []byte{9, 9}}, {transport.Get, backing[200:210]}}
		for i, o := range ops {
			d := l.RDMA.Slot(uint64(i))
			d.Kind, d.Local, d.Key, d.Off = o.kind, o.buf, 1, 0
		}
		l.RDMA.Publish(uint64(len(ops)))
		c := p.(*port).list(&p.(*port).outs)[0]
		deadline := time.Now().Add(5 * time.Second)
		for {
			if l.Err() != nil {
				// Descriptors published before the failure complete; later
				// ones are the AMI's to fail.
				<-c.finished
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("link error %v, %d of %d RDMA descriptors complete", l.Err(), l.RDMA.TransferCounter().Load(), len(ops))
			}
			p.Progress()
			time.Sleep(50 * time.Microsecond)
		}
		<-served
		for i, b := range backing {
			if (i < 100 || i >= 104 && i < 200 || i >= 210) && b != 0xEE {
				t.Fatalf("byte %d outside the GET buffers changed", i)
			}
		}
	})
}
