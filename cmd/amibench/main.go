// Command amibench measures amigo with the methodology of the OSU
// micro-benchmarks: the same message sizes (0 bytes to 4 MiB), warm-up and
// iteration counts, a window of 64 messages for bandwidth, and the columns
// OSU prints, or with --json one object per line:
//
//	{"benchmark":"latency","size":8,"latency_us":0.11}
//	{"benchmark":"bw","size":1048576,"mb_per_s":38000}
//
// Run bare, amibench starts its ranks itself (-n, default 2) as processes of
// this host, serving them PMI, with AMIGO_TRANSPORT set from --transport;
// under a launcher (mpiexec, srun, amirun) every process is one rank, and
// --transport, if given, picks its adapter (AMIGO_TRANSPORT, if set, must
// agree); with --transport loop the ranks are goroutines of this process.
// Headers and rows name the adapter the ranks use.
//
//	go run ./cmd/amibench                       latency and bandwidth, 2 ranks
//	amibench -b latency,bw,bibw --json          over shared memory
//	amibench -n 16 -b a2a --min-size 1024 --max-size 1024
//	amirun -n 4 amibench -b mbw_mr
//
// --csv prints a header and one line per value instead; --plot FILE draws
// latency and bandwidth against message size on log axes (SVG or PNG, by
// the file's extension). On a terminal, a progress line on standard error
// says which benchmark measured which size last and what is left.
//
// The compare subcommand overlays runs kept as JSON lines (amibench's, and
// the C benchmark's under MPICH and Open MPI that bench/ writes in the same
// shape), prints each figure with its ratio to the first run's, and with -o
// draws them in one plot:
//
//	amibench -b latency,bw --json > shm.json
//	amibench compare -o shm-vs-mpich.png shm.json mpich.json
//
// Benchmarks are registered by the files of this command (register), one
// table for all: pt2pt.go, rma.go, atomic.go, a2a.go, coll.go, stop.go,
// floor.go, idle.go; a file that adds more needs no other edit. -b list
// prints them. output.go, plot.go and compare.go hold the output formats,
// the plots and the compare subcommand.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/internal/launch"
)

// Benchmark is one measurement amibench runs. Run is called on every rank
// of the job at once (SPMD); it measures and, on rank 0, prints rows with
// Env.Header and Env.Row.
type Benchmark struct {
	Name string
	// Doc is one line for -b list.
	Doc string
	// MinRanks is the smallest job it runs on (default 2).
	MinRanks int
	// Run runs the benchmark on one rank.
	Run func(e *Env) error
}

var benchmarks = map[string]*Benchmark{}

// register adds b to the table; each file registers its benchmarks from
// init.
func register(b Benchmark) {
	if _, dup := benchmarks[b.Name]; dup {
		panic("amibench: benchmark " + b.Name + " registered twice")
	}
	if b.MinRanks == 0 {
		b.MinRanks = 2
	}
	benchmarks[b.Name] = &b
}

// Options are the command's flags.
type Options struct {
	Benchmarks []string
	N          int
	MinSize    int
	MaxSize    int
	Iterations int // 0: OSU's counts
	Warmup     int // -1: OSU's counts
	Settle     time.Duration
	Idle       time.Duration
	Window     int
	JSON       bool
	CSV        bool
	// Plot is the file (.svg or .png) rank 0 draws latency and bandwidth
	// against size in at the end.
	Plot string
	// Transport is the adapter between the ranks; run as a rank, the one
	// the client uses once open (the flag's, if it was given, else
	// AMIGO_TRANSPORT's or the automatic choice), which every header and
	// row reports.
	Transport string
	// TransportSet: --transport was given.
	TransportSet bool
	Buffers      string
	// AtomicTarget is the memory of the word of the atomic benchmarks.
	AtomicTarget string
	Timeout      time.Duration
	Stats        bool
	CPUProfile   string
	Trace        string
	MemProfile   string
	// BindTo is "core" (each rank started bare pinned to a core of its
	// own, as OSU runs under mpirun are) or "none".
	BindTo string
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func parse(args []string, stderr io.Writer) (*Options, error) {
	o := &Options{}
	fs := flag.NewFlagSet("amibench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bench := fs.String("b", "latency,bw", "benchmarks to run, comma-separated; \"list\" lists them")
	fs.IntVar(&o.N, "n", 2, "ranks to start when run bare or with --transport loop")
	fs.IntVar(&o.MinSize, "min-size", 0, "smallest message size in bytes")
	fs.IntVar(&o.MaxSize, "max-size", 4<<20, "largest message size in bytes")
	fs.IntVar(&o.Iterations, "iterations", 0, "iterations per size (0: OSU's counts)")
	fs.IntVar(&o.Warmup, "warmup", -1, "warm-up iterations per size (-1: OSU's counts)")
	fs.DurationVar(&o.Settle, "settle", 30*time.Millisecond, "time every rank keeps advancing after start-up, before the first benchmark, for the Go runtime's monitor thread to settle (see Env.settle)")
	fs.IntVar(&o.Window, "window", 64, "messages per window of the bandwidth tests")
	fs.DurationVar(&o.Idle, "idle", 10*time.Second, "how long the ranks of -b idle wait")
	fs.BoolVar(&o.JSON, "json", false, "print one JSON object per line")
	fs.BoolVar(&o.CSV, "csv", false, "print comma-separated values: a header, then one line per value (benchmark,transport,ranks,size,metric,value)")
	fs.StringVar(&o.Plot, "plot", "", "draw latency and bandwidth against message size in this file at the end (SVG or PNG, by its extension)")
	fs.StringVar(&o.Transport, "transport", "shm", "adapter between the ranks: shm, tcp, ofi (ranks as processes; ofi in builds with -tags ofi, provider from AMIGO_OFI_PROVIDER) or loop (ranks as goroutines of this process)")
	fs.StringVar(&o.Buffers, "buffers", "heap", "message buffers: heap (Go memory, as OSU's malloc) or shared (AllocMemory, shared segments)")
	fs.StringVar(&o.AtomicTarget, "atomic-target", "shared", "the word of atomic_lat and atomic_rate: shared (AllocMemory) or heap (registered Go memory)")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "give up after this long")
	fs.BoolVar(&o.Stats, "stats", false, "print each rank's amigo counters to standard error at the end")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write rank R's CPU profile to this file with .R appended")
	fs.StringVar(&o.Trace, "trace", "", "write rank R's execution trace (go tool trace) to this file with .R appended")
	fs.StringVar(&o.BindTo, "bind-to", "core", "ranks started bare: core pins rank r to the r-th core (when there are as many cores as ranks), none leaves them free")
	fs.StringVar(&o.MemProfile, "memprofile", "", "record every allocation of rank R and write the profile to this file with .R appended")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	fs.Visit(func(f *flag.Flag) { o.TransportSet = o.TransportSet || f.Name == "transport" })
	for _, b := range strings.Split(*bench, ",") {
		if b = strings.TrimSpace(b); b != "" {
			o.Benchmarks = append(o.Benchmarks, b)
		}
	}
	switch {
	case o.Transport != "shm" && o.Transport != "tcp" && o.Transport != "ofi" && o.Transport != "loop":
		return nil, fmt.Errorf("--transport %q: want shm, tcp, ofi or loop", o.Transport)
	case o.Buffers != "heap" && o.Buffers != "shared":
		return nil, fmt.Errorf("--buffers %q: want heap or shared", o.Buffers)
	case o.AtomicTarget != "heap" && o.AtomicTarget != "shared":
		return nil, fmt.Errorf("--atomic-target %q: want heap or shared", o.AtomicTarget)
	case o.BindTo != "core" && o.BindTo != "none":
		return nil, fmt.Errorf("--bind-to %q: want core or none", o.BindTo)
	case o.JSON && o.CSV:
		return nil, errors.New("--json and --csv: choose one")
	case o.Plot != "" && plotFormat(o.Plot) == "":
		return nil, fmt.Errorf("--plot %q: want a file ending in .svg or .png", o.Plot)
	case o.MinSize < 0 || o.MaxSize < o.MinSize || o.MaxSize > 1<<30:
		return nil, fmt.Errorf("sizes %d to %d", o.MinSize, o.MaxSize)
	case o.Window < 1 || o.Iterations < 0 || o.N < 1:
		return nil, fmt.Errorf("window %d, iterations %d, -n %d", o.Window, o.Iterations, o.N)
	}
	return o, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "compare" {
		return compare(args[1:], os.Stdin, stdout, stderr)
	}
	o, err := parse(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "amibench:", err)
		return 2
	}
	if len(o.Benchmarks) == 1 && o.Benchmarks[0] == "list" {
		list(stdout)
		return 0
	}
	for _, b := range o.Benchmarks {
		if benchmarks[b] == nil {
			fmt.Fprintf(stderr, "amibench: unknown benchmark %q (-b list lists them)\n", b)
			return 2
		}
	}
	switch {
	case o.Transport == "loop":
		err = runLocal(o, stdout)
	case launch.InRank():
		err = runRank(o, stdout)
	default:
		err = runLauncher(args, o, stdout, stderr)
	}
	if err != nil {
		fmt.Fprintln(stderr, "amibench:", err)
		return 1
	}
	return 0
}

func list(w io.Writer) {
	var names []string
	for n := range benchmarks {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		b := benchmarks[n]
		fmt.Fprintf(w, "%-12s %s (at least %d ranks)\n", n, b.Doc, b.MinRanks)
	}
}

// runLauncher starts -n copies of this program as the ranks of a job and
// waits for them. Rank 0's output is amibench's.
func runLauncher(args []string, o *Options, stdout, stderr io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	floor, err := newFloorFile()
	if err != nil {
		return err
	}
	defer floor.Close()
	ctx, cancel := context.WithTimeout(context.Background(), o.Timeout+10*time.Second)
	defer cancel()
	// Ranks write concurrently; a writer that is not a file gets one
	// write at a time.
	stdout, stderr = serialize(stdout), serialize(stderr)
	job, err := launch.Start(launch.Options{
		N:         o.N,
		Argv:      append([]string{self}, args...),
		Env:       []string{"AMIGO_TRANSPORT=" + o.Transport, floorEnv + "=4"},
		Files:     []*os.File{floor},
		BindCores: o.BindTo == "core",
		Output: func(r int) (io.Writer, io.Writer) {
			if r == 0 {
				return stdout, stderr
			}
			return nil, stderr
		},
	})
	if err != nil {
		return err
	}
	return job.Wait(ctx)
}

// transportOf names the adapter c uses between processes: the one its
// configuration forces, else "auto:" and those it opened (the in-process
// one left out).
func transportOf(c *amigo.Client) string {
	if t := c.Config().Transport; t != "auto" {
		return t
	}
	var names []string
	for _, n := range c.Adapters() {
		if n != "loop" {
			names = append(names, n)
		}
	}
	return "auto:" + strings.Join(names, "+")
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func serialize(w io.Writer) io.Writer {
	if _, ok := w.(*os.File); ok {
		return w
	}
	return &lockedWriter{w: w}
}

// runRank runs this process as one rank of a launched job.
func runRank(o *Options, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
	defer cancel()
	// Under a launcher (mpiexec, srun, amirun) --transport reaches the
	// rank as a flag only: it picks the adapter, unless AMIGO_TRANSPORT
	// names another, which is an error rather than a run over an adapter
	// the output would not name.
	var cfg amigo.Config
	if o.TransportSet {
		if env := os.Getenv("AMIGO_TRANSPORT"); env != "" && env != o.Transport {
			return fmt.Errorf("--transport %s, but AMIGO_TRANSPORT=%s: give one, or the same", o.Transport, env)
		}
		cfg.Transport = o.Transport
	}
	c, err := amigo.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	o.Transport = transportOf(c)
	if o.CPUProfile != "" {
		f, err := os.Create(fmt.Sprintf("%s.%d", o.CPUProfile, c.Rank()))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if o.Trace != "" {
		f, err := os.Create(fmt.Sprintf("%s.%d", o.Trace, c.Rank()))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			return err
		}
		defer trace.Stop()
	}
	if o.MemProfile != "" {
		runtime.MemProfileRate = 1
		defer func() {
			if f, err := os.Create(fmt.Sprintf("%s.%d", o.MemProfile, c.Rank())); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	e := newEnv(ctx, c, o, stdout, nil)
	err = e.runAll()
	// Stay until every rank is done with us.
	if berr := e.Barrier(); err == nil {
		err = berr
	}
	if err == nil {
		err = e.drawPlot()
	}
	if err != nil {
		return fmt.Errorf("rank %d: %w", c.Rank(), err)
	}
	return nil
}

// runLocal runs -n ranks as goroutines of this process.
func runLocal(o *Options, stdout io.Writer) error {
	cl, err := amigo.NewLocal(o.N, amigo.Config{})
	if err != nil {
		return err
	}
	defer func() {
		for _, c := range cl {
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
	defer cancel()
	shared := &localShared{}
	errs := make([]error, len(cl))
	var wg sync.WaitGroup
	for r, c := range cl {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := newEnv(ctx, c, o, stdout, shared)
			err := e.runAll()
			if berr := e.Barrier(); err == nil {
				err = berr
			}
			if err == nil {
				err = e.drawPlot()
			}
			if err != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, err)
				cancel()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
