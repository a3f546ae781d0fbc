package tcp

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/transport"
)

// expectClosed fails t unless the other end of c closes it within a few
// seconds.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := io.Copy(io.Discard, c)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the target did not close the connection: %v", err)
	}
	if n != 0 {
		t.Fatalf("the target sent %d bytes to a stranger", n)
	}
}

// Strangers (anything that does not speak the handshake, or says nothing)
// are refused, each with a logged reason, and the target keeps serving its
// job.
func TestStranger(t *testing.T) {
	ads, _, log := newWorld(t, 2, Options{Timeout: 500 * time.Millisecond})
	ports := openAll(t, ads)
	cases := []struct {
		name   string
		send   []byte
		closeW bool
		says   string
	}{
		{"http", []byte("GET / HTTP/1.1\r\nHost: amigo\r\nUser-Agent: curl\r\nAccept: */*\r\n\r\n\r\n\r\n"), false, `bad magic "GET / HT"`},
		{"garbage", bytes.Repeat([]byte{0xff}, 200), false, `bad magic "\xff\xff`},
		{"short", []byte("AMIGO"), true, "closed after 5 of the 72 bytes"},
		{"silent", nil, false, "i/o timeout"},
	}
	// Each case's line says something no earlier case's line says: the
	// refusal is counted before it is logged, so its line seen means its
	// count is in.
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := ads[0].Stats().Refused
			c, err := net.Dial("tcp", ads[0].Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Write(tc.send)
			if tc.closeW {
				c.(*net.TCPConn).CloseWrite()
			}
			expectClosed(t, c)
			log.waitFor(t, tc.says)
			if got := ads[0].Stats().Refused - before; got != 1 {
				t.Errorf("%d refusals counted, want 1", got)
			}
		})
	}
	if !log.has("not an amigo peer") {
		t.Error("no refusal names a stranger")
	}
	exchange(t, ports[1], ports[0], addr(1, 0), addr(0, 0), 100)
}

// otherJob returns a job of two ranks with its own secret in which rank 1's
// published address is addr1.
func otherJob(secret []byte, addr1 string) []*job {
	js := jobs(2, secret)
	js[1].Put(KVSKey, []byte(addr1))
	return js
}

// A peer with another secret (another job) is refused by the target, which
// logs why; an initiator that reaches an impostor (who cannot prove it holds
// the secret) gives up, failing its link with an error naming the peer.
func TestWrongSecret(t *testing.T) {
	ads, _, log := newWorld(t, 2, Options{})
	ports := openAll(t, ads)

	// A stranger job's rank 0 connects to our rank 1.
	other := make([]byte, 32)
	rand.Read(other)
	js := otherJob(other, ads[1].Addr())
	var rlog logSink
	rlog.t = t
	rogue, err := New(js[0], transport.NewRegions(), Options{Addr: "127.0.0.1", Logf: rlog.logf})
	if err != nil {
		t.Fatal(err)
	}
	defer rogue.Close()
	if err := rogue.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	rp, _ := rogue.Open(0, transport.NewDoorbell())
	l, err := rp.Link(addr(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	waitErr(t, l, rp)
	var pe *transport.PeerError
	if !errors.As(l.Err(), &pe) || pe.Addr.Rank != 1 {
		t.Fatalf("rogue's link error %v does not name rank 1", l.Err())
	}
	log.waitFor(t, "wrong job secret")
	if ads[1].Stats().Refused != 1 || ads[1].Stats().Accepted != 0 {
		t.Fatalf("target stats %+v", ads[1].Stats())
	}

	// An impostor answers our rank 0's hello for rank 1 with a proof it
	// cannot have made.
	imp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer imp.Close()
	go func() {
		c, err := imp.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var hb [helloSize]byte
		io.ReadFull(c, hb[:])
		var a answer
		rand.Read(a.nonce[:])
		rand.Read(a.proof[:])
		c.Write(a.append(nil))
		io.Copy(io.Discard, c)
	}()
	ads[0].mu.Lock()
	real := ads[0].peers[1]
	ads[0].peers[1] = imp.Addr().String()
	ads[0].mu.Unlock()
	defer func() {
		ads[0].mu.Lock()
		ads[0].peers[1] = real
		ads[0].mu.Unlock()
	}()
	p2, _ := ads[0].Open(1, transport.NewDoorbell())
	l2, err := p2.Link(addr(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	waitErr(t, l2, p2)
	if !errors.Is(l2.Err(), ErrBadProof) || !errors.As(l2.Err(), &pe) || pe.Addr.Rank != 1 {
		t.Fatalf("link to an impostor failed with %v, want a bad proof naming rank 1", l2.Err())
	}
	// The job's own links still work.
	exchange(t, ports[1], ports[0], addr(1, 0), addr(0, 0), 100)
}

func waitErr(t *testing.T, l *transport.Link, p transport.Port) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for l.Err() == nil {
		if time.Now().After(deadline) {
			t.Fatal("link did not fail")
		}
		p.Progress()
		time.Sleep(time.Millisecond)
	}
}

// recorder forwards one connection to target and records what the
// initiator sent and what the target answered.
type recorder struct {
	ln       net.Listener
	mu       sync.Mutex
	fromInit bytes.Buffer
	fromTgt  bytes.Buffer
}

func newRecorder(t *testing.T, target string) *recorder {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				return
			}
			cp := func(dst, src net.Conn, rec *bytes.Buffer) {
				buf := make([]byte, 4096)
				for {
					n, err := src.Read(buf)
					if n > 0 {
						r.mu.Lock()
						rec.Write(buf[:n])
						r.mu.Unlock()
						dst.Write(buf[:n])
					}
					if err != nil {
						dst.Close()
						src.Close()
						return
					}
				}
			}
			go cp(out, in, &r.fromInit)
			go cp(in, out, &r.fromTgt)
		}
	}()
	return r
}

func (r *recorder) bytes() (fromInit, fromTgt []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.fromInit.Bytes()), bytes.Clone(r.fromTgt.Bytes())
}

// A recorded handshake replayed to the target is refused; the secret, and
// the key derived from it, never appear on the wire.
func TestReplayedHandshake(t *testing.T) {
	ads, _, log := newWorld(t, 2, Options{})
	ports := openAll(t, ads)
	rec := newRecorder(t, ads[1].Addr())
	ads[0].mu.Lock()
	ads[0].peers[1] = rec.ln.Addr().String()
	ads[0].mu.Unlock()
	exchange(t, ports[0], ports[1], addr(0, 0), addr(1, 0), 50)
	fromInit, fromTgt := rec.bytes()
	if len(fromInit) < helloSize+proofSize {
		t.Fatalf("recorded %d bytes", len(fromInit))
	}
	k := deriveKeys(testSecret)
	for _, b := range [][]byte{fromInit, fromTgt} {
		if bytes.Contains(b, testSecret) || bytes.Contains(b, k.mac[:]) || bytes.Contains(b, k.mac[:8]) {
			t.Fatal("the secret or the key crossed the wire")
		}
	}
	// Replay the initiator's hello and proof to the target.
	before := ads[1].Stats()
	c, err := net.Dial("tcp", ads[1].Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(fromInit[:helloSize+proofSize])
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, _ := io.ReadAll(c)
	if len(got) > answerSize {
		t.Fatalf("the target answered a replay with %d bytes", len(got))
	}
	log.waitFor(t, "replayed handshake")
	if after := ads[1].Stats(); after.Refused != before.Refused+1 || after.Accepted != before.Accepted {
		t.Fatalf("stats before %+v after %+v", before, after)
	}
	// A target that never saw the hello (another process) refuses it too:
	// the replayed proof answers another nonce.
	hc, tc := net.Pipe()
	defer hc.Close()
	go func() {
		tc.Write(fromInit[:helloSize])
		io.ReadFull(tc, make([]byte, answerSize))
		tc.Write(fromInit[helloSize : helloSize+proofSize])
		io.Copy(io.Discard, tc)
	}()
	hc.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = respond(hc, &k, 1, &nonceCache{}, "pipe", func(hello) uint8 { return verdictOK })
	if !errors.Is(err, ErrBadProof) {
		t.Fatalf("fresh target took a replayed proof: %v", err)
	}
	if !strings.Contains(err.Error(), "replayed or forged") {
		t.Errorf("error %q does not say why", err)
	}
	exchange(t, ports[1], ports[0], addr(1, 0), addr(0, 0), 50)
}
