// Command ftsum is a master–worker job that survives the loss of workers,
// with package mpi's fault-tolerant communicators: rank 0 hands out tasks
// (task i sums k*k over k in [i*Chunk, (i+1)*Chunk)), the workers compute
// them and send the results back. When a worker dies, the master's receive
// fails with mpi.ErrProcFailed naming it; the master acknowledges the
// failure (FailureAck), hands the dead worker's task to another worker and
// goes on. At the end the survivors shrink the world to themselves
// (Shrink), the master broadcasts the total on the new communicator, and
// they all check it against the closed form.
//
// Under a launcher that lets the job outlive a rank:
//
//	amirun --keep-going -n 4 ftsum -tasks 1000 -die 2:50
//
// (-die R:K makes worker R kill itself with SIGKILL when it receives a
// task after K tasks done.) Run
// bare, it starts -ranks ranks as goroutines of this process, and the
// worker of -die closes its client instead.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/mpi"
)

// Params describe a run.
type Params struct {
	Tasks int
	Chunk int
	// DieRank, if positive, is a worker that dies, by calling Die, when
	// it receives a task after DieAfter tasks done.
	DieRank, DieAfter int
	Die               func()
}

const (
	tagTask   = 1
	tagResult = 2
	stop      = 1<<63 - 1 // the task that tells a worker to stop
)

// ErrLeft is what Run returns on the worker that left (Params.Die).
var ErrLeft = errors.New("ftsum: this worker left the job")

// task returns the result of task i: the sum of k*k over its chunk.
func task(i, chunk int) uint64 {
	var s uint64
	for k := i * chunk; k < (i+1)*chunk; k++ {
		s += uint64(k) * uint64(k)
	}
	return s
}

// Want returns the total of tasks tasks of chunk: the sum of k*k for k
// below tasks*chunk.
func Want(tasks, chunk int) uint64 {
	n := uint64(tasks * chunk)
	return (n - 1) * n * (2*n - 1) / 6
}

// Report is what a rank ends with.
type Report struct {
	Total    uint64 // the total, as broadcast on the survivors' communicator
	Lost     []int  // world ranks the master lost (master only)
	Survived int    // ranks of the shrunk communicator
}

// Run runs the job on w: rank 0 is the master, the others workers.
func Run(ctx context.Context, w *mpi.Comm, prm Params) (Report, error) {
	var rep Report
	// Every rank is past World before work starts: a worker that dies
	// then leaves no rank behind in World, which is not fault tolerant.
	// (On up to 16 ranks a worker waits in Barrier for the master's
	// release only: a worker that dies right after it fails no other.)
	if err := w.Barrier(ctx); err != nil {
		return rep, err
	}
	var total uint64
	var err error
	if w.Rank() == 0 {
		total, rep.Lost, err = master(ctx, w, prm)
	} else {
		err = worker(ctx, w, prm)
	}
	if err != nil {
		return rep, err
	}
	// Every survivor: shrink to the ranks still alive, and share the
	// master's total there.
	s, err := w.Shrink(ctx)
	if err != nil {
		return rep, err
	}
	defer s.Free()
	buf := []uint64{total}
	if err := mpi.Bcast(ctx, s, buf, 0); err != nil {
		return rep, fmt.Errorf("Bcast on the survivors: %w", err)
	}
	rep.Total, rep.Survived = buf[0], s.Size()
	return rep, nil
}

// master hands out the tasks and sums the results; it returns the total
// and the workers it lost. A worker without a task waits, idle, until the
// last result is in: a task of a worker that dies may come its way.
func master(ctx context.Context, w *mpi.Comm, prm Params) (uint64, []int, error) {
	const (
		idle = -1
		gone = -2
	)
	next := 0
	var redo []int                // tasks of dead workers, to hand out again
	busy := make([]int, w.Size()) // task of each worker, idle or gone
	var total uint64
	var lost []int
	// lose takes the failed workers out, and keeps their tasks for others.
	lose := func(err error) error {
		var pf *mpi.ProcFailedError
		if !errors.As(err, &pf) {
			return err
		}
		if err := w.FailureAck(); err != nil {
			return err
		}
		for _, r := range w.Failed() {
			if busy[r] == gone {
				continue
			}
			lost = append(lost, w.WorldRank(r))
			if busy[r] >= 0 {
				redo = append(redo, busy[r])
			}
			busy[r] = gone
		}
		return nil
	}
	// feed hands a task to every idle worker while there are tasks.
	feed := func() error {
		for r := 1; r < w.Size(); r++ {
			if busy[r] != idle {
				continue
			}
			t := -1
			switch {
			case len(redo) > 0:
				t, redo = redo[len(redo)-1], redo[:len(redo)-1]
			case next < prm.Tasks:
				t, next = next, next+1
			default:
				return nil
			}
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], uint64(t))
			busy[r] = t
			if err := w.Send(ctx, b[:], r, tagTask); err != nil {
				if err := lose(err); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for r := 1; r < w.Size(); r++ {
		busy[r] = idle
	}
	for {
		if err := feed(); err != nil {
			return 0, nil, err
		}
		working, alive := false, false
		for r := 1; r < w.Size(); r++ {
			working = working || busy[r] >= 0
			alive = alive || busy[r] != gone
		}
		if !alive {
			return 0, lost, fmt.Errorf("every worker failed")
		}
		if !working {
			break
		}
		var b [8]byte
		st, err := w.Recv(ctx, b[:], mpi.AnySource, tagResult)
		if err != nil {
			if err := lose(err); err != nil {
				return 0, nil, err
			}
			continue
		}
		total += binary.LittleEndian.Uint64(b[:])
		busy[st.Source] = idle
	}
	// Every task is done: the workers still there stop.
	for r := 1; r < w.Size(); r++ {
		if busy[r] == idle {
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], uint64(stop))
			if err := w.Send(ctx, b[:], r, tagTask); err != nil {
				if err := lose(err); err != nil {
					return 0, nil, err
				}
			}
		}
	}
	return total, lost, nil
}

// worker computes tasks until told to stop.
func worker(ctx context.Context, w *mpi.Comm, prm Params) error {
	for done := 0; ; done++ {
		var b [8]byte
		if _, err := w.Recv(ctx, b[:], 0, tagTask); err != nil {
			return err
		}
		t := int(binary.LittleEndian.Uint64(b[:]))
		if t == stop {
			return nil
		}
		if w.Rank() == prm.DieRank && done == prm.DieAfter && prm.Die != nil {
			prm.Die() // with task t in hand
			return ErrLeft
		}
		binary.LittleEndian.PutUint64(b[:], task(t, prm.Chunk))
		if err := w.Send(ctx, b[:], 0, tagResult); err != nil {
			return err
		}
	}
}

func main() {
	ranks := flag.Int("ranks", 4, "ranks to start as goroutines when run without a launcher")
	tasks := flag.Int("tasks", 1000, "tasks")
	chunk := flag.Int("chunk", 1000, "numbers per task")
	die := flag.String("die", "", "R:K: worker R dies when it receives a task after K tasks done")
	flag.Parse()
	prm := Params{Tasks: *tasks, Chunk: *chunk}
	if *die != "" {
		r, k, ok := strings.Cut(*die, ":")
		var err1, err2 error
		prm.DieRank, err1 = strconv.Atoi(r)
		prm.DieAfter, err2 = strconv.Atoi(k)
		if !ok || err1 != nil || err2 != nil || prm.DieRank < 1 {
			fmt.Fprintf(os.Stderr, "ftsum: -die %q: want R:K, R a worker\n", *die)
			os.Exit(2)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, launched := os.LookupEnv("PMI_RANK"); launched {
		os.Exit(runProcess(ctx, prm))
	}
	os.Exit(runLocal(ctx, *ranks, prm))
}

// runProcess runs this process as one rank of a launched job.
func runProcess(ctx context.Context, prm Params) int {
	prm.Die = func() {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	cl, err := amigo.Open(ctx, amigo.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "ftsum:", err)
		return 1
	}
	defer cl.Close()
	return rank(ctx, cl, prm)
}

// runLocal runs n ranks as goroutines.
func runLocal(ctx context.Context, n int, prm Params) int {
	cls, err := amigo.NewLocal(n, amigo.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "ftsum:", err)
		return 1
	}
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i, cl := range cls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cl.Close()
			p := prm
			p.Die = func() { cl.Close() }
			codes[i] = rank(ctx, cl, p)
		}()
	}
	wg.Wait()
	return slices.Max(codes)
}

// rank runs one rank on client cl and prints the master's report.
func rank(ctx context.Context, cl *amigo.Client, prm Params) int {
	w, err := mpi.World(ctx, cl.Context(0), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ftsum:", err)
		return 1
	}
	rep, err := Run(ctx, w, prm)
	if errors.Is(err, ErrLeft) {
		return 0
	}
	if err == nil {
		err = mpi.Finalize(ctx, w)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "ftsum: rank %d: %v\n", cl.Rank(), err)
		return 1
	}
	want := Want(prm.Tasks, prm.Chunk)
	if rep.Total != want {
		fmt.Fprintf(os.Stderr, "ftsum: rank %d: total %d, want %d\n", cl.Rank(), rep.Total, want)
		return 1
	}
	if cl.Rank() == 0 {
		fmt.Printf("total %d of %d tasks on %d ranks; lost %v; %d survived\n", rep.Total, prm.Tasks, cl.Size(), rep.Lost, rep.Survived)
	}
	return 0
}
