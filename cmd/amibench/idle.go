package main

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// idle measures what waiting ranks cost: every rank waits on its context's
// Ready channel (a select with a timer, as a server would) for --idle, and
// reports the processor time its process used meanwhile (getrusage, every
// thread: amigo's goroutines, the runtime's, the adapters' engines) as a
// percentage of one core. A context that spins or polls shows here.

func init() {
	register(Benchmark{Name: "idle", Doc: "processor time of ranks that wait on Context.Ready for --idle, percent of a core (max over ranks)", Run: idleBench})
}

func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func idleBench(e *Env) error {
	if e.Opts.Transport == "loop" {
		return fmt.Errorf("idle measures a process per rank: not with --transport loop")
	}
	e.Header("Idle Ranks: Processor Time While Waiting on Ready", Field{"CPU (% of a core)", "cpu_percent"}, Field{"Wakes", "wakes"})
	if err := e.Barrier(); err != nil {
		return err
	}
	c := e.Ctx
	for c.Advance() > 0 {
	}
	t0, w0 := cpuTime(), time.Now()
	deadline := time.NewTimer(e.Opts.Idle)
	defer deadline.Stop()
	wakes := 0
	for done := false; !done; {
		select {
		case <-c.Ready():
			wakes++
			for c.Advance() > 0 {
			}
		case <-deadline.C:
			done = true
		}
	}
	pct := 100 * float64(cpuTime()-t0) / float64(time.Since(w0))
	all, err := e.Gather(pct)
	if err != nil {
		return err
	}
	ws, err := e.Gather(float64(wakes))
	if err != nil {
		return err
	}
	worst, most := 0.0, 0.0
	for i := range all {
		worst = max(worst, all[i])
		most = max(most, ws[i])
	}
	e.Row(0, worst, most)
	return e.Barrier()
}
