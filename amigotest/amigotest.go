// Package amigotest runs amigo jobs inside tests: N ranks as goroutines of
// the test process, each with its own Client, a bounded run time, and a
// message-based barrier that keeps advancing while it waits.
package amigotest

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/bootstrap"
)

// DefaultTimeout bounds a job run by Run unless Options says otherwise.
const DefaultTimeout = 2 * time.Minute

// Options tune Run.
type Options struct {
	Config  amigo.Config
	Timeout time.Duration // default DefaultTimeout
	// Over names the adapter between the ranks: "" or "loop" for the
	// in-process adapter, or an adapter between processes ("shm", "tcp"),
	// which the ranks then use although they share this process.
	Over string
}

// Rank is what each rank's function gets.
type Rank struct {
	*amigo.Client
	// Ctx is context 0 of the rank.
	Ctx *amigo.Context
	// Deadline ends when the job's time is up, or when another rank failed.
	Deadline context.Context

	barrier *barrier
}

// Run starts an in-process job of n ranks and calls fn for each rank on a
// goroutine of its own. It fails t with every rank's error, or when the job
// outlives its timeout (naming the ranks that did not return), and closes the
// clients when all ranks returned.
func Run(t testing.TB, n int, opts Options, fn func(r *Rank) error) {
	t.Helper()
	if err := RunErr(n, opts, fn); err != nil {
		t.Fatal(err)
	}
}

// RunErr is Run returning the job's failure instead of failing a test.
func RunErr(n int, opts Options, fn func(r *Rank) error) error {
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	clients, closeJobs, err := open(n, opts)
	if err != nil {
		return err
	}
	defer closeJobs()
	deadline, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	errs := make([]error, n)
	finished := make([]bool, n)
	// A rank that returned keeps advancing its context 0 until every rank
	// returned, as a finalize would: its last messages may not have left yet,
	// and peers may still need its answers.
	var left sync.WaitGroup
	left.Add(n)
	allLeft := make(chan struct{})
	go func() { left.Wait(); close(allLeft) }()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		rk := &Rank{Client: clients[r], Ctx: clients[r].Context(0), Deadline: deadline}
		rk.barrier = newBarrier(rk)
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			var once sync.Once
			leave := func() { once.Do(left.Done) }
			defer func() {
				if p := recover(); p != nil {
					leave()
					buf := make([]byte, 8<<10)
					buf = buf[:runtime.Stack(buf, false)]
					mu.Lock()
					errs[r] = fmt.Errorf("panic: %v\n%s", p, buf)
					mu.Unlock()
					cancel()
				}
				mu.Lock()
				finished[r] = true
				mu.Unlock()
			}()
			err := fn(rk)
			mu.Lock()
			errs[r] = err
			mu.Unlock()
			if err != nil {
				// Stop the other ranks: they may wait for this one.
				cancel()
			}
			leave()
			_ = rk.Ctx.Wait(deadline, func() bool {
				select {
				case <-allLeft:
					return true
				default:
					return false
				}
			})
		}(r)
	}
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	select {
	case <-all:
	case <-time.After(timeout + 5*time.Second):
		mu.Lock()
		var hung, msgs []string
		for r, f := range finished {
			if !f {
				hung = append(hung, fmt.Sprint(r))
			}
			if errs[r] != nil {
				msgs = append(msgs, fmt.Sprintf("\nrank %d: %v", r, errs[r]))
			}
		}
		mu.Unlock()
		// What the ranks that returned said is often why the others wait.
		return fmt.Errorf("amigotest: job of %d ranks did not finish in %v; ranks still running: %s%s", n, timeout, strings.Join(hung, ","), strings.Join(msgs, ""))
	}
	var msgs []string
	for r, e := range errs {
		if e != nil {
			msgs = append(msgs, fmt.Sprintf("rank %d: %v", r, e))
		}
	}
	for _, c := range clients {
		if err := c.Close(); err != nil {
			msgs = append(msgs, fmt.Sprintf("rank %d: close: %v", c.Rank(), err))
		}
	}
	if len(msgs) > 0 {
		return fmt.Errorf("amigotest: %s", strings.Join(msgs, "\n"))
	}
	return nil
}

// open makes the clients of the job.
func open(n int, opts Options) ([]*amigo.Client, func(), error) {
	if opts.Over == "" || opts.Over == "loop" {
		cl, err := amigo.NewLocal(n, opts.Config)
		return cl, func() {}, err
	}
	cfg := opts.Config
	cfg.Transport = opts.Over
	jobs := bootstrap.NewLocal(n)
	closeJobs := func() {
		for _, j := range jobs {
			_ = j.Close()
		}
	}
	cl := make([]*amigo.Client, n)
	errs := make([]error, n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for r := range jobs {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			cl[r], errs[r] = amigo.OpenJob(ctx, jobs[r], cfg)
		}(r)
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			for _, c := range cl {
				if c != nil {
					_ = c.Close()
				}
			}
			closeJobs()
			return nil, nil, fmt.Errorf("amigotest: rank %d over %s: %w", r, opts.Over, err)
		}
	}
	return cl, closeJobs, nil
}

// BarrierDispatch is the dispatch id the test barrier uses on context 0.
const BarrierDispatch amigo.Dispatch = amigo.MaxDispatch - 1

type barrier struct {
	r      *Rank
	epoch  uint32
	counts map[uint32]int
}

func newBarrier(r *Rank) *barrier {
	b := &barrier{r: r, counts: make(map[uint32]int)}
	_ = r.Ctx.SetDispatch(BarrierDispatch, func(c *amigo.Context, m *amigo.Message) {
		if len(m.Header) == 4 {
			e := uint32(m.Header[0]) | uint32(m.Header[1])<<8 | uint32(m.Header[2])<<16 | uint32(m.Header[3])<<24
			b.counts[e]++
		}
	})
	return b
}

// Barrier returns once every rank of the job called it as often as this one,
// advancing context 0 meanwhile.
func (r *Rank) Barrier() error {
	b := r.barrier
	b.epoch++
	e := b.epoch
	hdr := []byte{byte(e), byte(e >> 8), byte(e >> 16), byte(e >> 24)}
	for p := 0; p < r.Size(); p++ {
		if p == r.Rank() {
			continue
		}
		if err := r.Ctx.SendImmediate(amigo.EndpointOf(p), BarrierDispatch, hdr, nil); err != nil {
			return err
		}
	}
	err := r.Ctx.Wait(r.Deadline, func() bool { return b.counts[e] >= r.Size()-1 })
	delete(b.counts, e)
	if err != nil {
		return fmt.Errorf("barrier %d: %w", e, err)
	}
	return nil
}
