package amigo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sort"
	"sync/atomic"

	"github.com/amigo-hpc/amigo/bootstrap"
	"github.com/amigo-hpc/amigo/internal/ring"
	"github.com/amigo-hpc/amigo/internal/sysmon"
	"github.com/amigo-hpc/amigo/internal/wire"
	"github.com/amigo-hpc/amigo/transport"
	"github.com/amigo-hpc/amigo/transport/loop"
)

// processAdapter is an adapter that reaches ranks in other processes.
type processAdapter struct {
	name string
	// prefer orders adapters: a peer is reached by the reaching adapter
	// with the smallest prefer (shared memory before TCP).
	prefer int
	// inline is the largest header plus data of a Send the adapter carries
	// best inline, for a program that left Config.InlineMax to its
	// default: a job whose peers are all reached by adapters that choose
	// more than the default takes the least of their choices. Zero: the
	// default.
	inline int
	// inlineFor, if set, is inline for the adapter open made: a choice
	// that depends on what the adapter chose for this host.
	inlineFor func(transport.Adapter) int
	// open makes the adapter of this rank and publishes what peers need to
	// reach it with job.Put. It returns nil, nil when it does not apply
	// here.
	open func(ctx context.Context, job transport.Bootstrap, regions *transport.Regions, cfg *Config) (transport.Adapter, error)
}

// processAdapters lists the adapters between processes. Each adapter's
// file registers itself with registerProcessAdapter.
var processAdapters []processAdapter

func registerProcessAdapter(pa processAdapter) {
	processAdapters = append(processAdapters, pa)
	sort.SliceStable(processAdapters, func(i, j int) bool { return processAdapters[i].prefer < processAdapters[j].prefer })
}

// ProcessAdapters returns the names of the adapters between processes that
// this build has, in the order Open prefers them for a peer both reach. A
// rank always reaches itself through the in-process adapter, "loop".
func ProcessAdapters() []string {
	names := make([]string, len(processAdapters))
	for i, pa := range processAdapters {
		names[i] = pa.name
	}
	return names
}

// Open joins the job this process was started in: under a launcher that
// speaks PMI (mpiexec, srun, amirun) it learns its rank and its peers from
// the launcher; started alone it is a job of one rank. The job ends with
// Close.
func Open(ctx context.Context, cfg Config) (*Client, error) {
	job, err := bootstrap.Open(ctx)
	if err != nil {
		return nil, fmt.Errorf("amigo: bootstrap: %w", err)
	}
	c, err := OpenJob(ctx, job, cfg)
	if err != nil {
		_ = job.Close()
		return nil, err
	}
	c.job = job
	c.watchLost(job)
	return c, nil
}

// OpenJob joins job, which the caller keeps and closes. Every rank of the job
// must call it at the same point: it publishes this rank's addresses and
// waits in a fence for the others'.
func OpenJob(ctx context.Context, job bootstrap.Job, cfg Config) (*Client, error) {
	processRanks.Add(1)
	c, err := openJob(ctx, job, cfg)
	if err != nil {
		processRanks.Add(-1)
	}
	return c, err
}

// processRanks counts the clients of this process from the start of OpenJob
// to Close: ranks that share the process (tests, or programs that run
// several ranks as goroutines over the adapters between processes). Each
// counts itself before the job's first fence, so after it a rank sees every
// rank of its job that shares its process.
var processRanks atomic.Int32

func openJob(ctx context.Context, job bootstrap.Job, cfg Config) (*Client, error) {
	eff, err := cfg.resolve(os.LookupEnv)
	if err != nil {
		return nil, err
	}
	rank, size := job.Rank(), job.Size()
	regions := transport.NewRegions()
	engine := loop.EngineInline
	if eff.LoopEngine == "async" {
		engine = loop.EngineAsync
	}
	// The in-process adapter (this rank to itself) is adapters[0]; it is
	// made after the adapters between processes, whose choices of
	// InlineMax its descriptor buffers must hold.
	adapters := []transport.Adapter{nil}
	inline := []int{0} // by adapter: processAdapter.inline
	fail := func(err error) (*Client, error) {
		for _, a := range adapters {
			if a != nil {
				_ = a.Close()
			}
		}
		return nil, err
	}
	for _, pa := range processAdapters {
		if eff.Transport != "auto" && eff.Transport != pa.name {
			continue
		}
		a, err := pa.open(ctx, job, regions, &eff)
		if err != nil {
			return fail(fmt.Errorf("amigo: %s: %w", pa.name, err))
		}
		if a != nil {
			adapters = append(adapters, a)
			in := pa.inline
			if pa.inlineFor != nil {
				in = pa.inlineFor(a)
			}
			inline = append(inline, in)
		}
	}
	selfSlots := eff.RingSlots
	if eff.inlineAuto {
		for _, in := range inline {
			for wire.AMSize(in, 0, true) > ring.MaxPayload(selfSlots) && selfSlots < ring.MaxSlots {
				selfSlots *= 2
			}
		}
	}
	fab, err := loop.NewFabric(size, loop.Options{RingSlots: selfSlots, RDMASlots: eff.RDMASlots, Engine: engine})
	if err != nil {
		return fail(err)
	}
	self, err := fab.Attach(rank, regions)
	if err != nil {
		return fail(err)
	}
	adapters[0] = self
	if err := job.Fence(ctx); err != nil {
		return fail(fmt.Errorf("amigo: bootstrap fence: %w", err))
	}
	for _, a := range adapters {
		if s, ok := a.(transport.Starter); ok {
			if err := s.Start(ctx); err != nil {
				return fail(fmt.Errorf("amigo: %s: start: %w", a.Name(), err))
			}
		}
	}
	route := make([]uint8, size)
	var unreachable []int
	for r := 0; r < size; r++ {
		if r == rank {
			continue
		}
		found := false
		for i, a := range adapters[1:] {
			if a.Reaches(r) {
				route[r] = uint8(i + 1)
				found = true
				break
			}
		}
		if !found {
			unreachable = append(unreachable, r)
		}
	}
	if len(unreachable) > 0 {
		return fail(fmt.Errorf("amigo: rank %d: no adapter (transport %q) reaches ranks %v", rank, eff.Transport, unreachable))
	}
	eff.InlineMax = jobInline(eff, rank, route, inline, selfSlots)
	c, err := newClient(rank, size, eff, regions, adapters, route)
	if err != nil {
		return fail(err)
	}
	c.joined = true
	c.procsSet, c.procsWas = limitProcs(adapters, eff.OversubscribedProcs)
	c.monitor, c.monitorRelease, c.monitorErr = holdMonitor(adapters, eff.Monitor)
	return c, nil
}

// holdMonitor gives the Go runtime's monitor thread the policy that
// Config.Monitor names (package internal/sysmon) and returns the function
// that gives it back, or nil. "auto" is "batch" when an adapter between
// processes reports a processor for each rank of this host and none
// reports more ranks than processors: there a rank polls on a processor of
// its own, and the monitor's wake-ups, each a preemption of the poller,
// cost it a fifth of its time for milliseconds after each sleep (64
// windows of 4 KiB took 8 us, 30 when one fell on such a wake-up). On an
// oversubscribed host ranks yield and sleep instead of polling, and the
// monitor is what hands the P of a sleeping rank to its other goroutines.
// It returns the policy in force and, when it could not set the one asked
// for, the reason; the rank runs on without.
func holdMonitor(adapters []transport.Adapter, policy string) (string, func(), error) {
	if policy == "auto" {
		policy = "normal"
		if over, dedicated := hostShare(hostReports(adapters)); dedicated && !over {
			policy = "batch"
		}
	}
	if policy == "normal" {
		return policy, nil, nil
	}
	release, err := sysmon.Hold(sysmon.Policy(policy))
	if err != nil {
		return "normal", nil, err
	}
	return policy, release, nil
}

// Monitor reports the scheduling policy this client gave the Go runtime's
// monitor thread when it opened (Config.Monitor): "batch" or "idle", kept
// until Close, or "normal" when it left the thread as it was; with the
// reason, when Config.Monitor asked for a change that could not be made.
func (c *Client) Monitor() (string, error) {
	if c.monitor == "" {
		return "normal", c.monitorErr
	}
	return c.monitor, c.monitorErr
}

// releaseMonitor ends the client's hold on the monitor thread's policy.
func (c *Client) releaseMonitor() {
	if c.monitorRelease != nil {
		c.monitorRelease()
		c.monitorRelease = nil
	}
}

// jobInline returns Config.InlineMax for a job whose ranks other than rank
// are reached by the adapters route names: the default raised to the least
// of the adapters' choices (processAdapter.inline) when the program left it
// to the default and every peer's adapter chooses more, within half the
// descriptor buffer of the in-process adapter, selfSlots slots (openJob
// sizes it to hold the choices).
func jobInline(eff Config, rank int, route []uint8, inline []int, selfSlots int) int {
	if !eff.inlineAuto {
		return eff.InlineMax
	}
	least := 0
	for r, i := range route {
		if r == rank {
			continue
		}
		if inline[i] <= eff.InlineMax {
			return eff.InlineMax
		}
		if least == 0 || inline[i] < least {
			least = inline[i]
		}
	}
	if least == 0 {
		return eff.InlineMax
	}
	return min(least, ring.MaxPayload(selfSlots)-wire.AMSize(0, 0, true))
}

// closeJob finalizes the job the client opened itself.
func (c *Client) closeJob() error {
	if c.job == nil {
		return nil
	}
	err := c.job.Close()
	if errors.Is(err, bootstrap.ErrClosed) {
		return nil
	}
	return err
}

// limitProcs lowers GOMAXPROCS to procs when an adapter reports this host
// oversubscribed (Config.OversubscribedProcs) and this process runs one rank,
// unless the environment set GOMAXPROCS or procs is -1. It returns the value
// it set and the one before, or zeros. Measured on a 2-core host, 64 B
// allreduce with 4 and 8 ranks: 36 and 158 us with the runtime's GOMAXPROCS
// of 2, 20 and 91 us with 1.
func limitProcs(adapters []transport.Adapter, procs int) (set, was int) {
	if procs < 1 || os.Getenv("GOMAXPROCS") != "" || processRanks.Load() != 1 {
		return 0, 0
	}
	if over, _ := hostShare(hostReports(adapters)); over {
		if was = runtime.GOMAXPROCS(0); was > procs {
			runtime.GOMAXPROCS(procs)
			return procs, was
		}
	}
	return 0, 0
}

// hostReports returns what each adapter between processes that knows says
// of this host: whether it runs more ranks than it has processors.
func hostReports(adapters []transport.Adapter) []bool {
	var reports []bool
	for _, a := range adapters {
		if h, ok := a.(transport.Oversubscriber); ok {
			reports = append(reports, h.Oversubscribed())
		}
	}
	return reports
}

// hostShare sums up reports: over, some adapter says the host is
// oversubscribed; dedicated, some says it has a processor for each rank.
func hostShare(reports []bool) (over, dedicated bool) {
	for _, o := range reports {
		over = over || o
		dedicated = dedicated || !o
	}
	return over, dedicated
}

// restoreProcs gives back the GOMAXPROCS that limitProcs lowered, unless the
// program changed it since.
func (c *Client) restoreProcs() {
	if c.procsSet > 0 && runtime.GOMAXPROCS(0) == c.procsSet {
		runtime.GOMAXPROCS(c.procsWas)
	}
}
