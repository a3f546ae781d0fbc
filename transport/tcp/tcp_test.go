package tcp_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/transport"
	"github.com/amigo-hpc/amigo/transport/tcp"
	"github.com/amigo-hpc/amigo/transport/transporttest"
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
func newWorld(t testing.TB, n int, opts tcp.Options) ([]*tcp.Adapter, []*transport.Regions, *logSink) {
	t.Helper()
	log := &logSink{t: t}
	if opts.Logf == nil {
		opts.Logf = log.logf
	}
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1"
	}
	js := jobs(n, testSecret)
	var ads []*tcp.Adapter
	var regs []*transport.Regions
	for r := 0; r < n; r++ {
		reg := transport.NewRegions()
		a, err := tcp.New(js[r], reg, opts)
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

func factory(opts tcp.Options) transporttest.Factory {
	return func(t *testing.T, n int) *transporttest.World {
		ads, regs, _ := newWorld(t, n, opts)
		w := &transporttest.World{Regions: regs}
		for _, a := range ads {
			w.Adapters = append(w.Adapters, a)
		}
		return w
	}
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, factory(tcp.Options{RingSlots: 64, RDMASlots: 8}))
}

func TestConformanceDefaults(t *testing.T) {
	transporttest.Run(t, factory(tcp.Options{}))
}
