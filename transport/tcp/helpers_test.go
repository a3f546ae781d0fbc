package tcp

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/internal/ring"
	"github.com/amigo-hpc/amigo/transport"
)

// job is an in-memory bootstrap for adapters in one process.
type job struct {
	rank, size int
	kv         *sync.Map
	secret     []byte
}

func (j *job) Rank() int { return j.rank }
func (j *job) Size() int { return j.size }
func (j *job) Put(key string, v []byte) error {
	j.kv.Store(fmt.Sprintf("%d/%s", j.rank, key), append([]byte(nil), v...))
	return nil
}
func (j *job) Get(_ context.Context, rank int, key string) ([]byte, error) {
	v, ok := j.kv.Load(fmt.Sprintf("%d/%s", rank, key))
	if !ok {
		return nil, fmt.Errorf("rank %d key %s: not found", rank, key)
	}
	return v.([]byte), nil
}
func (j *job) Node(int) int   { return 0 }
func (j *job) Secret() []byte { return j.secret }

func jobs(n int, secret []byte) []*job {
	kv := &sync.Map{}
	out := make([]*job, n)
	for r := range out {
		out[r] = &job{rank: r, size: n, kv: kv, secret: secret}
	}
	return out
}

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// logSink collects the adapters' log lines.
type logSink struct {
	mu    sync.Mutex
	lines []string
	t     testing.TB
}

func (l *logSink) logf(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	l.mu.Lock()
	l.lines = append(l.lines, s)
	l.mu.Unlock()
	l.t.Log(s)
}

func (l *logSink) has(sub string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.lines {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func (l *logSink) waitFor(t testing.TB, sub string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !l.has(sub) {
		if time.Now().After(deadline) {
			t.Fatalf("no log line says %q", sub)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// newWorld makes n adapters on 127.0.0.1 sharing an in-memory bootstrap.
func newWorld(t testing.TB, n int, opts Options) ([]*Adapter, []*transport.Regions, *logSink) {
	t.Helper()
	log := &logSink{t: t}
	if opts.Logf == nil {
		opts.Logf = log.logf
	}
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1"
	}
	js := jobs(n, testSecret)
	var ads []*Adapter
	var regs []*transport.Regions
	for r := 0; r < n; r++ {
		reg := transport.NewRegions()
		a, err := New(js[r], reg, opts)
		if err != nil {
			t.Fatal(err)
		}
		ads = append(ads, a)
		regs = append(regs, reg)
	}
	for _, a := range ads {
		if err := a.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return ads, regs, log
}

var (
	producersMu sync.Mutex
	producers   = map[*transport.Link]*producer{}
)

// producer injects packets into a link as the AMI does, without callbacks.
type producer struct {
	l    *transport.Link
	tail uint64
}

// send writes payload as one descriptor, reporting false when the link's
// descriptor buffer has no room.
func (p *producer) send(payload []byte) bool {
	r := p.l.Msg
	k := ring.SlotsFor(len(payload))
	pad := r.PadFor(p.tail, k)
	if uint64(r.Slots())-(p.tail-r.HeadCounter().Load()) < uint64(pad+k) {
		return false
	}
	if pad > 0 {
		r.WritePad(p.tail, pad)
		p.tail += uint64(pad)
	}
	copy(r.Payload(p.tail, len(payload)), payload)
	r.Seal(p.tail, len(payload))
	p.tail += uint64(k)
	r.Publish(p.tail)
	return true
}

// collector records the packets a port delivers.
type collector struct {
	mu   sync.Mutex
	pkts map[transport.Addr][][]byte
}

func (c *collector) Receive(from transport.Addr, pkt []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pkts == nil {
		c.pkts = make(map[transport.Addr][][]byte)
	}
	c.pkts[from] = append(c.pkts[from], append([]byte(nil), pkt...))
}

func (c *collector) count(from transport.Addr) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pkts[from])
}

// pollFrom advances p, delivering to c, until c holds a packet from from;
// it reports false if deadline passes first.
func pollFrom(p transport.Port, c *collector, from transport.Addr, deadline time.Time) bool {
	for c.count(from) == 0 {
		if time.Now().After(deadline) {
			return false
		}
		p.Progress()
		p.Poll(c, 64)
	}
	return true
}

func addr(rank, ctx int) transport.Addr {
	return transport.Addr{Rank: int32(rank), Context: int32(ctx)}
}

// exchange sends n packets from port src (rank from) to port dst (rank to)
// and fails t unless all arrive intact within a few seconds.
func exchange(t testing.TB, src, dst transport.Port, from, to transport.Addr, n int) {
	t.Helper()
	l, err := src.Link(to)
	if err != nil {
		t.Fatal(err)
	}
	if l.Err() != nil {
		t.Fatalf("link %v → %v: %v", from, to, l.Err())
	}
	producersMu.Lock()
	p := producers[l]
	if p == nil {
		p = &producer{l: l}
		producers[l] = p
	}
	producersMu.Unlock()
	var col collector
	deadline := time.Now().Add(10 * time.Second)
	for sent := 0; col.count(from) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%v → %v: %d of %d packets after 10s (link error %v)", from, to, col.count(from), n, l.Err())
		}
		for sent < n && p.send([]byte(fmt.Sprintf("packet %d", sent))) {
			sent++
		}
		src.Progress()
		dst.Poll(&col, 64)
	}
	for i, b := range col.pkts[from] {
		if string(b) != fmt.Sprintf("packet %d", i) {
			t.Fatalf("%v → %v: packet %d is %q", from, to, i, b)
		}
	}
}

// pairLinks makes a world of two adapters with opts, opens context 0 of
// each, and a link from each to the other with a producer writing into it.
func pairLinks(t testing.TB, opts Options) ([]transport.Port, [2]*producer) {
	t.Helper()
	ads, _, _ := newWorld(t, 2, opts)
	ports := openAll(t, ads)
	var prod [2]*producer
	for r := range 2 {
		l, err := ports[r].Link(addr(1-r, 0))
		if err != nil {
			t.Fatal(err)
		}
		prod[r] = &producer{l: l}
	}
	return ports, prod
}

// open opens context 0 of each adapter.
func openAll(t testing.TB, ads []*Adapter) []transport.Port {
	t.Helper()
	ports := make([]transport.Port, len(ads))
	for i, a := range ads {
		p, err := a.Open(0, transport.NewDoorbell())
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = p
	}
	t.Cleanup(func() {
		for _, a := range ads {
			a.Close()
		}
	})
	return ports
}
