package tcp

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/amigo-hpc/amigo/transport"
)

// forwarder accepts connections and pipes each to the address in to, as a
// port mapping or a proxy in front of a rank's listener would.
type forwarder struct {
	ln       net.Listener
	to       atomic.Pointer[string]
	accepted atomic.Int64
	bytes    atomic.Int64
	wg       sync.WaitGroup
}

func newForwarder(t *testing.T) *forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{ln: ln}
	f.wg.Add(1)
	go f.serve()
	t.Cleanup(func() { ln.Close(); f.wg.Wait() })
	return f
}

func (f *forwarder) serve() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.accepted.Add(1)
		s, err := net.Dial("tcp", *f.to.Load())
		if err != nil {
			c.Close()
			continue
		}
		f.wg.Add(2)
		pipe := func(dst, src net.Conn) {
			defer f.wg.Done()
			n, _ := io.Copy(dst, src)
			f.bytes.Add(n)
			dst.Close()
			src.Close()
		}
		go pipe(s, c)
		go pipe(c, s)
	}
}

// A rank that advertises an address other than the one it listens on is
// reached there: its peers dial the forwarder, the forwarder its listener,
// and packets flow both ways with the handshake passed.
func TestAdvertise(t *testing.T) {
	fw := newForwarder(t)
	log := &logSink{t: t}
	js := jobs(2, testSecret)
	opts := Options{Addr: "127.0.0.1", Logf: log.logf}
	a0, err := New(js[0], transport.NewRegions(), opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.Advertise = fw.ln.Addr().String()
	a1, err := New(js[1], transport.NewRegions(), opts)
	if err != nil {
		t.Fatal(err)
	}
	listening := a1.ln.Addr().String()
	fw.to.Store(&listening)
	if a1.Addr() != fw.ln.Addr().String() || listening == a1.Addr() {
		t.Fatalf("rank 1 published %s, listens on %s; want the forwarder's %s", a1.Addr(), listening, fw.ln.Addr())
	}
	ads := []*Adapter{a0, a1}
	for _, a := range ads {
		if err := a.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := a0.peerAddr(1); got != fw.ln.Addr().String() {
		t.Fatalf("rank 0 learned %q for rank 1, want the advertised %s", got, fw.ln.Addr())
	}
	ports := openAll(t, ads)
	exchange(t, ports[0], ports[1], addr(0, 0), addr(1, 0), 200)
	exchange(t, ports[1], ports[0], addr(1, 0), addr(0, 0), 200)
	if fw.accepted.Load() == 0 {
		t.Fatal("rank 0 reached rank 1 without the advertised forwarder")
	}
	for _, a := range ads {
		a.Close()
	}
	if fw.bytes.Load() == 0 {
		t.Fatal("nothing went through the forwarder")
	}
}

// A host alone takes the listening port; malformed values are refused when
// the options are validated.
func TestAdvertiseValues(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"10.1.2.3", "10.1.2.3:4242"},
		{"10.1.2.3:80", "10.1.2.3:80"},
		{"node7.example", "node7.example:4242"},
		{"::1", "[::1]:4242"},
		{"[fe80::1]:9", "[fe80::1]:9"},
	} {
		got, err := advertised(tc.in, 4242)
		if err != nil || got != tc.want {
			t.Errorf("advertised(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"host:0", "host:99999", "host:port", ":80", "a b", "[::1]x"} {
		if _, err := (Options{Advertise: bad}).Validate(); err == nil || !strings.Contains(err.Error(), "Advertise") {
			t.Errorf("Advertise %q: got %v, want it refused", bad, err)
		}
	}
}
