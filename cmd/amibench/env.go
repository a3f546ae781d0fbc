package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/amigo-hpc/amigo"
)

// Env is what a benchmark's Run gets on each rank: the rank's client and
// context 0, the options, and helpers that keep benchmarks short.
type Env struct {
	Client *amigo.Client
	Ctx    *amigo.Context
	Rank   int
	Size   int
	Opts   *Options
	// Deadline ends when the run's time is up.
	Deadline context.Context

	out    io.Writer // rank 0 only
	bench  string
	fields []Field
	extra  []extraField // JSON-only fields of the next row
	malloc uint64       // Mallocs when CountAllocs started
	shared *localShared // ranks as goroutines only

	dispatch amigo.Dispatch // base id of the running benchmark
	runs     int
	bar      barrier
	gat      gather
	err      error // first error reported by a callback

	records  []record // rank 0's rows, kept for --plot
	progress progress // the progress line on a terminal (rank 0)
	warmed   string   // the benchmark whose first size had its longer warm-up
}

// Field is one column of a benchmark's output: OSU's column title and the
// JSON key.
type Field struct {
	Column string
	Key    string
}

// Common fields.
var (
	fLatency  = Field{"Latency (us)", "latency_us"}
	fBW       = Field{"Bandwidth (MB/s)", "mb_per_s"}
	fMBs      = Field{"MB/s", "mb_per_s"}
	fMsgRate  = Field{"Messages/s", "messages_per_s"}
	fAvgLat   = Field{"Avg Latency(us)", "latency_us"}
	fMaxLat   = Field{"Max Latency(us)", "max_latency_us"}
	fOneWayNs = Field{"Latency (us)", "latency_us"}
)

// barrierDispatch is the dispatch id of Env.Barrier; benchmarks use ids from
// dispatchBase up.
const (
	barrierDispatch amigo.Dispatch = amigo.MaxDispatch - 1
	gatherDispatch  amigo.Dispatch = amigo.MaxDispatch - 2
	dispatchBase    amigo.Dispatch = 16
	dispatchPerRun                 = 16
)

func newEnv(ctx context.Context, c *amigo.Client, o *Options, out io.Writer, shared *localShared) *Env {
	e := &Env{Client: c, Ctx: c.Context(0), Rank: c.Rank(), Size: c.Size(), Opts: o, Deadline: ctx, shared: shared}
	if e.Rank == 0 {
		e.out = out
		e.progress = progress{on: isTerminal(os.Stderr), w: os.Stderr}
	}
	e.bar.init(e)
	e.gat.init(e)
	return e
}

func (e *Env) runAll() error {
	if err := e.settle(); err != nil {
		return err
	}
	defer e.progress.end()
	if e.out != nil && e.Opts.CSV {
		fmt.Fprintln(e.out, csvHeader)
	}
	for i, name := range e.Opts.Benchmarks {
		b := benchmarks[name]
		e.progress.begin(name, len(e.Opts.Benchmarks)-1-i)
		if e.Size < b.MinRanks {
			return fmt.Errorf("%s needs at least %d ranks, the job has %d", name, b.MinRanks, e.Size)
		}
		e.bench = name
		e.fields = nil
		e.dispatch = dispatchBase + amigo.Dispatch(e.runs*dispatchPerRun)
		e.runs++
		if err := e.Barrier(); err != nil {
			return err
		}
		if err := b.Run(e); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if e.err != nil {
			return fmt.Errorf("%s: %w", name, e.err)
		}
		if err := e.Barrier(); err != nil {
			return err
		}
	}
	if e.Opts.Stats {
		fmt.Fprintf(os.Stderr, "rank %d: %+v\n", e.Rank, e.Ctx.Stats())
	}
	return nil
}

// settle keeps every rank advancing for Options.Settle after start-up, then
// synchronizes them.
//
// The Go runtime's monitor thread (sysmon) wakes every 20 us for some 50
// rounds, then ever less often up to every 10 ms, after it took a P back
// from a system call and after it slept through a moment when every P was
// idle or the world was stopped; start-up does all of these. With a core per
// rank, each wake-up pre-empts a rank that polls for messages, its own or
// its peer's. On a 2-core machine, a third of the 8-byte latency runs began
// their 2 ms timed loop within that spell: about 30 involuntary context
// switches each (one every 90 us: 20 us and the kernel's timer slack), and
// 0.12-0.27 us against 0.09 for the others. After 30 ms of settling, no run
// of 30 had more than 8. An MPI process has no such thread: its start-up is
// over when MPI_Init returns. A rank with a core of its own now also puts
// the monitor in SCHED_BATCH (amigo.Config.Monitor), where its wake-ups
// wait for a scheduler tick instead of preempting the rank, after start-up
// and after every later sleep alike; the settling stays for the rest of
// start-up's effects and for runs with AMIGO_MONITOR=normal.
func (e *Env) settle() error {
	if e.Opts.Settle <= 0 {
		return nil
	}
	if err := e.Barrier(); err != nil {
		return err
	}
	// Advance, not Wait: Wait would sleep once it found nothing to do for
	// a few milliseconds, and a rank that wakes from a sleep sets the
	// monitor going again.
	for end := time.Now().Add(e.Opts.Settle); time.Now().Before(end); {
		e.Ctx.Advance()
	}
	return e.Barrier()
}

// D returns the k-th dispatch id of the running benchmark (k < 16). A
// benchmark sets its handlers, then calls Barrier, then sends: a message
// that finds no handler is lost.
func (e *Env) D(k int) amigo.Dispatch { return e.dispatch + amigo.Dispatch(k) }

// Fail records the first error a callback saw.
func (e *Env) Fail(err error) {
	if err != nil && e.err == nil {
		e.err = err
	}
}

// Check is a done callback that records an error.
func (e *Env) Check(err error) { e.Fail(err) }

// Wait advances context 0 until cond holds.
func (e *Env) Wait(cond func() bool) error {
	if err := e.Ctx.Wait(e.Deadline, cond); err != nil {
		return err
	}
	return e.err
}

// Sizes returns the message sizes to measure: 0 (if from0 and in range),
// then powers of two from 1 up to the largest.
func (e *Env) Sizes(from0 bool) []int {
	var out []int
	if from0 && e.Opts.MinSize == 0 {
		out = append(out, 0)
	}
	for s := 1; s <= e.Opts.MaxSize; s *= 2 {
		if s >= e.Opts.MinSize {
			out = append(out, s)
		}
	}
	if len(out) == 0 || out[len(out)-1] != e.Opts.MaxSize && e.Opts.MaxSize == e.Opts.MinSize {
		out = append(out[:0], e.Opts.MinSize)
	}
	e.progress.sizesLeft = len(out)
	return out
}

// OSU's iteration and warm-up counts, by kind of benchmark; sizes above
// largeSize use the second pair.
const largeSize = 8192

type counts struct{ iters, skip, itersLarge, skipLarge int }

var (
	latCounts  = counts{10000, 100, 1000, 10}
	bwCounts   = counts{100, 10, 20, 2}
	collCounts = counts{1000, 100, 100, 10}
)

// Iters returns the iterations and warm-up iterations for size.
func (e *Env) Iters(size int, c counts) (iters, warm int) {
	iters, warm = c.iters, c.skip
	if size > largeSize {
		iters, warm = c.itersLarge, c.skipLarge
	}
	if e.Opts.Iterations > 0 {
		iters = e.Opts.Iterations
	}
	if e.Opts.Warmup >= 0 {
		warm = e.Opts.Warmup
	} else if e.warmed != e.bench {
		// The first size of a benchmark warms up for twice its
		// iterations: the milliseconds after a process starts (the Go
		// runtime's and the peer's own start, the processors' clocks)
		// would otherwise show in the first row alone — a 0.16 us
		// ping-pong measured 0.28 us as the first size and 0.16 us as
		// the second. Every rank counts alike.
		e.warmed = e.bench
		warm = max(warm, 2*iters)
	}
	return iters, warm
}

// Buffer returns n bytes for messages: Go memory, or with --buffers shared
// memory from AllocMemory.
func (e *Env) Buffer(n int) ([]byte, error) {
	if n == 0 {
		n = 1
	}
	var b []byte
	if e.Opts.Buffers == "shared" {
		r, err := e.Client.AllocMemory(n)
		if err != nil {
			return nil, err
		}
		b = r.Bytes()
	} else {
		b = make([]byte, n)
	}
	for i := range b {
		b[i] = byte(i)
	}
	return b, nil
}

// Header prints the benchmark's title and column titles (rank 0, not with
// --json) and sets the fields of its rows.
func (e *Env) Header(title string, fields ...Field) {
	e.fields = fields
	if e.out == nil || e.Opts.JSON || e.Opts.CSV {
		return
	}
	tr := e.Opts.Transport
	fmt.Fprintf(e.out, "# amigo %s (amibench: %d ranks, transport %s, %s buffers)\n", title, e.Size, tr, e.Opts.Buffers)
	var b strings.Builder
	fmt.Fprintf(&b, "%-10s", "# Size")
	for _, f := range fields {
		fmt.Fprintf(&b, "%20s", f.Column)
	}
	fmt.Fprintln(e.out, b.String())
}

type extraField struct {
	key string
	v   float64
}

// CountAllocs starts counting this process's heap allocations; AllocsPer
// ends it. Both read runtime.MemStats, which stops the world: call them
// outside the timed part. (runtime/metrics would not stop the world, but it
// counts what each P's cache has flushed only, and so misses allocations.)
func (e *Env) CountAllocs() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	e.malloc = ms.Mallocs
}

// AllocsPer adds to the next row (JSON only, as allocs_per_msg) the
// allocations since CountAllocs divided by msgs.
func (e *Env) AllocsPer(msgs int) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if msgs > 0 {
		e.extra = append(e.extra, extraField{"allocs_per_msg", float64(ms.Mallocs-e.malloc) / float64(msgs)})
	}
}

// Row prints one size's results (rank 0 only): OSU's columns, or with
// --json one object per line, with --csv one line per value; with --plot
// it also keeps them for the plot drawn at the end.
func (e *Env) Row(size int, vals ...float64) {
	if e.out == nil {
		e.extra = e.extra[:0]
		return
	}
	e.progressRow(size)
	rec := record{Benchmark: e.bench, Size: size, Transport: e.Opts.Transport, Ranks: e.Size}
	if e.Opts.JSON || e.Opts.CSV || e.Opts.Plot != "" {
		for i, f := range e.fields {
			rec.add(f.Key, round(vals[i]))
		}
		for _, x := range e.extra {
			rec.add(x.key, round(x.v))
		}
	}
	e.extra = e.extra[:0]
	if e.Opts.Plot != "" {
		e.records = append(e.records, rec)
	}
	switch {
	case e.Opts.JSON:
		fmt.Fprintln(e.out, rec.json())
		return
	case e.Opts.CSV:
		rec.csv(e.out)
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-10d", size)
	for _, v := range vals {
		fmt.Fprintf(&b, "%20.2f", v)
	}
	fmt.Fprintln(e.out, b.String())
}

// round keeps three decimals.
func round(v float64) float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return 0
	}
	return math.Round(v*1000) / 1000
}

// Elapsed returns microseconds since t.
func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// barrier is a message barrier on context 0 that keeps advancing while it
// waits: every rank tells every other rank it arrived.
type barrier struct {
	e      *Env
	epoch  uint32
	pair   uint32 // epochs of Barrier2, between ranks 0 and 1
	counts map[uint32]int
}

func (b *barrier) init(e *Env) {
	b.e = e
	b.counts = map[uint32]int{}
	_ = e.Ctx.SetDispatch(barrierDispatch, func(c *amigo.Context, m *amigo.Message) {
		if len(m.Header) == 4 {
			b.counts[binary.LittleEndian.Uint32(m.Header)]++
		}
	})
}

// Barrier returns once every rank called it as often as this one and its
// own messages were taken by their receivers, so that a rank may stop
// advancing (or exit) right after it.
func (e *Env) Barrier() error {
	b := &e.bar
	b.epoch++
	ep := b.epoch
	var hdr [4]byte
	binary.LittleEndian.PutUint32(hdr[:], ep)
	k := amigo.NewCounter()
	for p := 0; p < e.Size; p++ {
		if p != e.Rank {
			k.Add(1)
			if err := e.Ctx.Send(amigo.EndpointOf(p), barrierDispatch, hdr[:], nil, k.Done()); err != nil {
				return err
			}
		}
	}
	err := e.Ctx.Wait(e.Deadline, func() bool { return b.counts[ep] >= e.Size-1 && k.Pending() == 0 })
	delete(b.counts, ep)
	if err == nil {
		err = k.Err()
	}
	if err != nil {
		return fmt.Errorf("barrier %d: %w", ep, err)
	}
	return nil
}

// Gather sends v from every rank to rank 0, which returns all of them by
// rank (others return nil). Every rank must call it.
func (e *Env) Gather(v float64) ([]float64, error) {
	g := &e.gat
	g.epoch++
	ep := g.epoch
	if e.Rank != 0 {
		var b [12]byte
		binary.LittleEndian.PutUint32(b[:], ep)
		binary.LittleEndian.PutUint64(b[4:], math.Float64bits(v))
		k := amigo.NewCounter()
		k.Add(1)
		if err := e.Ctx.Send(amigo.EndpointOf(0), gatherDispatch, nil, b[:], k.Done()); err != nil {
			return nil, err
		}
		return nil, e.Ctx.WaitCounter(e.Deadline, k)
	}
	err := e.Wait(func() bool { return len(g.vals[ep]) == e.Size-1 })
	if err != nil {
		return nil, err
	}
	out := make([]float64, e.Size)
	out[0] = v
	for r, x := range g.vals[ep] {
		out[r] = x
	}
	delete(g.vals, ep)
	return out, nil
}

// gather holds the values sent to rank 0, by epoch and rank.
type gather struct {
	epoch uint32
	vals  map[uint32]map[int]float64
}

func (g *gather) init(e *Env) {
	g.vals = map[uint32]map[int]float64{}
	_ = e.Ctx.SetDispatch(gatherDispatch, func(c *amigo.Context, m *amigo.Message) {
		if len(m.Data) != 12 || m.Source.Rank <= 0 || m.Source.Rank >= e.Size {
			return
		}
		ep := binary.LittleEndian.Uint32(m.Data)
		if g.vals[ep] == nil {
			g.vals[ep] = map[int]float64{}
		}
		g.vals[ep][m.Source.Rank] = math.Float64frombits(binary.LittleEndian.Uint64(m.Data[4:]))
	})
}
