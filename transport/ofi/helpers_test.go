//go:build ofi

package ofi

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/amigo-hpc/amigo/transport"
)

// job is an in-memory bootstrap shared by the ranks of a test.
type job struct {
	rank, size int
	kv         *sync.Map
	node       func(rank int) int
}

func jobs(n int) []*job {
	kv := &sync.Map{}
	out := make([]*job, n)
	for r := range out {
		out[r] = &job{rank: r, size: n, kv: kv}
	}
	return out
}

func (j *job) Rank() int { return j.rank }
func (j *job) Size() int { return j.size }
func (j *job) Put(key string, value []byte) error {
	j.kv.Store(fmt.Sprintf("%d/%s", j.rank, key), append([]byte(nil), value...))
	return nil
}
func (j *job) Get(_ context.Context, rank int, key string) ([]byte, error) {
	v, ok := j.kv.Load(fmt.Sprintf("%d/%s", rank, key))
	if !ok {
		return nil, fmt.Errorf("no %q from rank %d", key, rank)
	}
	return v.([]byte), nil
}
func (j *job) Node(rank int) int {
	if j.node != nil {
		return j.node(rank)
	}
	return 0
}
func (j *job) Secret() []byte { return []byte("0123456789abcdef0123456789abcdef") }

// providers are the providers the tests run over: AMIGO_OFI_PROVIDERS
// (separated by commas) or tcp;ofi_rxm and shm.
func providers() []string {
	if v := os.Getenv("AMIGO_OFI_PROVIDERS"); v != "" {
		return strings.Split(v, ",")
	}
	return []string{"tcp;ofi_rxm", "shm"}
}

// logSink collects the adapters' log lines into the test's log.
type logSink struct {
	mu    sync.Mutex
	t     testing.TB
	lines []string
	done  bool
}

func (l *logSink) logf(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
	if !l.done {
		l.t.Log(s)
	}
}

// newWorld makes n adapters of one job over provider prov.
func newWorld(t testing.TB, n int, opts Options) ([]*Adapter, []*transport.Regions) {
	t.Helper()
	log := &logSink{t: t}
	t.Cleanup(func() { log.mu.Lock(); log.done = true; log.mu.Unlock() })
	if opts.Logf == nil {
		opts.Logf = log.logf
	}
	js := jobs(n)
	var ads []*Adapter
	var regs []*transport.Regions
	for r := 0; r < n; r++ {
		reg := transport.NewRegions()
		a, err := New(js[r], reg, opts)
		if err != nil {
			for _, a := range ads {
				a.Close()
			}
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
	return ads, regs
}

// cnt counts the packets it receives.
type cnt struct{ n int }

func (c *cnt) Receive(from transport.Addr, pkt []byte) { c.n++ }
