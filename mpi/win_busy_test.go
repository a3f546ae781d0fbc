package mpi_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/internal/launch"
	"github.com/amigo-hpc/amigo/mpi"
)

// Passive target with a target that computes: rank 0 spins in pure Go,
// calling nothing of mpi or amigo, until every other rank has finished its
// epochs (each says so with a FetchAndOp on a counter of rank 0's window,
// which rank 0 watches in its own memory). Meanwhile the others take locks,
// and accumulate into rank 0's window many elements at a time, with every
// operation on every element kind: Sum of int64 in messages of several
// pieces, Raccumulate of int8, Bor of uint16, RgetAccumulate of float32,
// Max of float64, Min of int32, Prod of int64, Bxor of uint8, Replace of
// int32, GetAccumulate of int16 (whose fetched values must be distinct per
// element: each update atomic), and NoOp fetches. Rank 0's program never
// answers: the accumulates complete by remote atomics. Afterwards rank 0
// checks every element. Both window kinds: memory of amigo's
// (WinAllocate) and of the caller's (WinCreate).
func TestWinBusyTarget(t *testing.T) { runRMA(t, rmaBusyTarget) }

// busySections are the typed parts of the window rmaBusyTarget uses: their
// element counts, in order, each starting at a multiple of 8 bytes.
var busySections = struct {
	sum64, racc8, bor16, rget32, max64, min32, prod64, bxor8, repl32, fetch16, done int
}{1100, 200, 100, 100, 64, 64, 40, 100, 50, 100, 1}

// busyEpochs is how many epochs each origin runs.
const busyEpochs = 3

type busyWin struct {
	mem     []byte
	sum64   []int64
	racc8   []int8
	bor16   []uint16
	rget32  []float32
	max64   []float64
	min32   []int32
	prod64  []int64
	bxor8   []uint8
	repl32  []int32
	fetch16 []int16
	done    []int64
	// displacements (bytes, unit 1) of each section
	at map[string]int
}

func busyLayout(mem []byte) *busyWin {
	b := &busyWin{mem: mem, at: map[string]int{}}
	off := 0
	take := func(name string, n, size int) []byte {
		off = (off + 7) &^ 7
		s := mem[off : off+n*size]
		b.at[name] = off
		off += n * size
		return s
	}
	s := busySections
	b.sum64 = mpi.View[int64](take("sum64", s.sum64, 8))
	b.racc8 = mpi.View[int8](take("racc8", s.racc8, 1))
	b.bor16 = mpi.View[uint16](take("bor16", s.bor16, 2))
	b.rget32 = mpi.View[float32](take("rget32", s.rget32, 4))
	b.max64 = mpi.View[float64](take("max64", s.max64, 8))
	b.min32 = mpi.View[int32](take("min32", s.min32, 4))
	b.prod64 = mpi.View[int64](take("prod64", s.prod64, 8))
	b.bxor8 = mpi.View[uint8](take("bxor8", s.bxor8, 1))
	b.repl32 = mpi.View[int32](take("repl32", s.repl32, 4))
	b.fetch16 = mpi.View[int16](take("fetch16", s.fetch16, 2))
	b.done = mpi.View[int64](take("done", s.done, 8))
	return b
}

// busyBytes is the window's size.
func busyBytes() int {
	b := busyLayout(make([]byte, 1<<20))
	return b.at["done"] + 8
}

func rmaBusyTarget(ctx context.Context, c *mpi.Comm) error {
	if c.Size() < 2 {
		return nil
	}
	for _, alloc := range []bool{true, false} {
		if err := busyRound(ctx, c, alloc); err != nil {
			return fmt.Errorf("WinAllocate %v: %w", alloc, err)
		}
	}
	return nil
}

func busyRound(ctx context.Context, c *mpi.Comm, alloc bool) error {
	me, n := c.Rank(), c.Size()
	size := busyBytes()
	var w *mpi.Win
	var err error
	if alloc {
		w, err = mpi.WinAllocate(ctx, c, size, 1)
	} else {
		backing := make([]int64, (size+7)/8) // 8-byte aligned
		w, err = mpi.WinCreate(ctx, c, mpi.Bytes(backing)[:size], 1)
	}
	if err != nil {
		return err
	}
	b := busyLayout(w.Memory())
	if me == 0 {
		clear(b.mem)
		for i := range b.max64 {
			b.max64[i] = -1
		}
		for i := range b.min32 {
			b.min32[i] = 1 << 30
		}
		for i := range b.prod64 {
			b.prod64[i] = 1
		}
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	fetched := make([]int16, busyEpochs*busySections.fetch16)
	if me == 0 {
		if err := compute(ctx, &b.done[0], int64(n-1)); err != nil {
			return err
		}
	} else if err := busyOrigin(ctx, w, b, me, fetched); err != nil {
		return err
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	all := make([]int16, n*len(fetched))
	if err := mpi.Gather(ctx, c, fetched, all, 0); err != nil {
		return err
	}
	if me == 0 {
		if err := busyCheck(b, n, all[len(fetched):]); err != nil {
			return err
		}
	}
	return w.Free(ctx)
}

// compute is the target's program while the others work: arithmetic, and
// a look at the counter in its own window memory (the origins' remote
// atomics reach it there), until it reaches want or ctx ends. It lets the
// scheduler run other goroutines now and then, as the processor a rank's
// process has to itself would: with ranks as goroutines of one process
// the adapters' goroutines that serve this rank share its processors.
func compute(ctx context.Context, done *int64, want int64) error {
	x := uint64(1)
	for i := 0; ; i++ {
		for k := 0; k < 1000; k++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
		runtime.Gosched()
		if atomic.LoadInt64(done) == want {
			if x == 0 {
				return errors.New("the generator reached zero") // keeps x alive
			}
			return nil
		}
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("the origins did not finish while rank 0 computed (%d of %d): %w", atomic.LoadInt64(done), want, err)
			}
		}
	}
}

func busyOrigin(ctx context.Context, w *mpi.Win, b *busyWin, me int, fetched []int16) error {
	s := busySections
	ones64 := fill(s.sum64, int64(1))
	ones8 := fill(s.racc8, int8(1))
	bits := fill(s.bor16, uint16(1)<<me)
	halves := fill(s.rget32, float32(0.5))
	old32 := make([]float32, s.rget32)
	twos := fill(s.prod64, int64(2))
	ffs := fill(s.bxor8, uint8(0xff))
	mine := fill(s.repl32, int32(me))
	ones16 := fill(s.fetch16, int16(1))
	peek := make([]int64, s.sum64)
	total := int64(w.Comm().Size()-1) * busyEpochs
	for ep := 0; ep < busyEpochs; ep++ {
		all := ep%2 == 1
		var err error
		if all {
			err = w.LockAll(ctx)
		} else {
			err = w.Lock(ctx, mpi.LockShared, 0)
		}
		if err != nil {
			return err
		}
		if err := mpi.Accumulate(w, ones64, 0, b.at["sum64"], mpi.Sum); err != nil {
			return err
		}
		q, err := mpi.Raccumulate(w, ones8, 0, b.at["racc8"], mpi.Sum)
		if err != nil {
			return err
		}
		if _, err := q.Wait(ctx); err != nil {
			return fmt.Errorf("Raccumulate: %w", err)
		}
		if err := mpi.Accumulate(w, bits, 0, b.at["bor16"], mpi.Bor); err != nil {
			return err
		}
		q, err = mpi.RgetAccumulate(w, halves, old32, 0, b.at["rget32"], mpi.Sum)
		if err != nil {
			return err
		}
		if _, err := q.Wait(ctx); err != nil {
			return fmt.Errorf("RgetAccumulate: %w", err)
		}
		for i, v := range old32 {
			if v < 0 || v >= float32(total)*0.5 || v*2 != float32(int(v*2)) {
				return fmt.Errorf("RgetAccumulate element %d fetched %v", i, v)
			}
		}
		if err := mpi.Accumulate(w, fill(s.max64, float64(me*100+ep)), 0, b.at["max64"], mpi.Max); err != nil {
			return err
		}
		if err := mpi.Accumulate(w, fill(s.min32, int32(1000-me*10-ep)), 0, b.at["min32"], mpi.Min); err != nil {
			return err
		}
		if ep == 0 {
			if err := mpi.Accumulate(w, twos, 0, b.at["prod64"], mpi.Prod); err != nil {
				return err
			}
		}
		if err := mpi.Accumulate(w, ffs, 0, b.at["bxor8"], mpi.Bxor); err != nil {
			return err
		}
		if err := mpi.Accumulate(w, mine, 0, b.at["repl32"], mpi.Replace); err != nil {
			return err
		}
		if err := mpi.GetAccumulate(w, ones16, fetched[ep*s.fetch16:(ep+1)*s.fetch16], 0, b.at["fetch16"], mpi.Sum); err != nil {
			return err
		}
		if err := mpi.GetAccumulate(w, nil, peek, 0, b.at["sum64"], mpi.NoOp); err != nil {
			return err
		}
		if all {
			err = w.UnlockAll(ctx)
		} else {
			err = w.Unlock(ctx, 0)
		}
		if err != nil {
			return err
		}
		// This origin's own adds are in every element it fetched.
		for i, v := range peek {
			if v < int64(ep+1) || v > total {
				return fmt.Errorf("epoch %d: NoOp fetched element %d = %d, want %d to %d", ep, i, v, ep+1, total)
			}
		}
	}
	if err := w.Lock(ctx, mpi.LockShared, 0); err != nil {
		return err
	}
	var prev int64
	if err := mpi.FetchAndOp(w, int64(1), &prev, 0, b.at["done"], mpi.Sum); err != nil {
		return err
	}
	return w.Unlock(ctx, 0)
}

func fill[T mpi.Numeric](n int, v T) []T {
	s := make([]T, n)
	for i := range s {
		s[i] = v
	}
	return s
}

// busyCheck checks rank 0's window after n-1 origins ran their epochs, and
// the int16 values they fetched (fetched: origin by origin, epoch by
// epoch, element by element).
func busyCheck(b *busyWin, n int, fetched []int16) error {
	origins := n - 1
	total := int64(origins * busyEpochs)
	var bits uint16
	for r := 1; r < n; r++ {
		bits |= 1 << r
	}
	want := func(what string, i int, got, want any) error {
		return fmt.Errorf("%s element %d = %v, want %v", what, i, got, want)
	}
	for i, v := range b.sum64 {
		if v != total {
			return want("Sum int64", i, v, total)
		}
	}
	for i, v := range b.racc8 {
		if int64(v) != total {
			return want("Raccumulate int8", i, v, total)
		}
	}
	for i, v := range b.bor16 {
		if v != bits {
			return want("Bor uint16", i, v, bits)
		}
	}
	for i, v := range b.rget32 {
		if v != float32(total)*0.5 {
			return want("Sum float32", i, v, float32(total)*0.5)
		}
	}
	for i, v := range b.max64 {
		if w := float64(origins*100 + busyEpochs - 1); v != w {
			return want("Max float64", i, v, w)
		}
	}
	for i, v := range b.min32 {
		if w := int32(1000 - origins*10 - (busyEpochs - 1)); v != w {
			return want("Min int32", i, v, w)
		}
	}
	for i, v := range b.prod64 {
		if w := int64(1) << origins; v != w {
			return want("Prod int64", i, v, w)
		}
	}
	for i, v := range b.bxor8 {
		w := uint8(0)
		if total%2 == 1 {
			w = 0xff
		}
		if v != w {
			return want("Bxor uint8", i, v, w)
		}
	}
	for i, v := range b.repl32 {
		if v < 1 || int(v) >= n {
			return want("Replace int32", i, v, "an origin's rank")
		}
	}
	per := busySections.fetch16
	for i, v := range b.fetch16 {
		if int64(v) != total {
			return want("GetAccumulate int16", i, v, total)
		}
		// Each update atomic: the values fetched for the element are
		// 0, 1, ..., total-1, each once.
		var seen []int16
		for k := 0; k < origins*busyEpochs; k++ {
			seen = append(seen, fetched[k*per+i])
		}
		slices.Sort(seen)
		for k, s := range seen {
			if int(s) != k {
				return fmt.Errorf("GetAccumulate int16 element %d: fetched %v, want each of 0 to %d once", i, seen, total-1)
			}
		}
	}
	return nil
}

// Request-based operations take a passive-target epoch only: outside any
// epoch, inside a Fence epoch and inside Start/Complete they are refused
// with ErrRMASync, touch nothing and leave no request behind; under Lock
// they work.
func TestWinRequestEpochs(t *testing.T) {
	run(t, 2, func(ctx context.Context, c *mpi.Comm) error {
		me := c.Rank()
		other := 1 - me
		w, err := mpi.WinAllocate(ctx, c, 64, 8)
		if err != nil {
			return err
		}
		clear(w.Memory())
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		v := []int64{7, 7}
		got := make([]int64, 2)
		refused := func(when string) error {
			calls := []struct {
				name string
				call func() (mpi.Request, error)
			}{
				{"Rput", func() (mpi.Request, error) { return mpi.Rput(w, v, other, 0) }},
				{"Rget", func() (mpi.Request, error) { return mpi.Rget(w, got, other, 0) }},
				{"Raccumulate", func() (mpi.Request, error) { return mpi.Raccumulate(w, v, other, 2, mpi.Sum) }},
				{"RgetAccumulate", func() (mpi.Request, error) {
					return mpi.RgetAccumulate(w, v, got, other, 4, mpi.Sum)
				}},
			}
			for _, k := range calls {
				q, err := k.call()
				if !errors.Is(err, mpi.ErrRMASync) || !strings.Contains(err.Error(), "passive-target") {
					return fmt.Errorf("%s %s: %v, want ErrRMASync naming the passive-target epoch", k.name, when, err)
				}
				if q != (mpi.Request{}) {
					return fmt.Errorf("%s %s: refused, but returned a request", k.name, when)
				}
			}
			return nil
		}
		if err := refused("outside any epoch"); err != nil {
			return err
		}
		if err := w.Fence(ctx, 0); err != nil {
			return err
		}
		if err := refused("inside a Fence epoch"); err != nil {
			return err
		}
		if err := w.Fence(ctx, mpi.ModeNoSucceed); err != nil {
			return err
		}
		all, err := c.Group()
		if err != nil {
			return err
		}
		g, err := all.Incl([]int{other})
		if err != nil {
			return err
		}
		if err := w.Post(g, 0); err != nil {
			return err
		}
		if err := w.Start(ctx, g, 0); err != nil {
			return err
		}
		if err := refused("inside Start/Complete"); err != nil {
			return err
		}
		if err := w.Complete(ctx); err != nil {
			return err
		}
		if err := w.Wait(ctx); err != nil {
			return err
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if !allZero(w.Memory()) {
			return fmt.Errorf("refused operations wrote %v", w.Memory())
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if err := w.Lock(ctx, mpi.LockShared, other); err != nil {
			return err
		}
		q, err := mpi.Raccumulate(w, v, other, 2, mpi.Sum)
		if err != nil {
			return err
		}
		if _, err := q.Wait(ctx); err != nil {
			return err
		}
		if err := w.Unlock(ctx, other); err != nil {
			return err
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if mem := mpi.View[int64](w.Memory()); mem[2] != 7 || mem[3] != 7 {
			return fmt.Errorf("Raccumulate under Lock left %v", mem)
		}
		return w.Free(ctx)
	})
}

// An accumulate toward a target that died fails within a bound, naming
// the target, well before the caller's context ends: rank 1 of 2 kills
// itself (SIGKILL) while rank 0 holds a lock on its window and keeps
// accumulating into it (messages the owner applies, whose replies never
// come), as processes over shared memory and over TCP.
func TestWinDeadTarget(t *testing.T) {
	for _, over := range []string{"shm", "tcp"} {
		t.Run(over, func(t *testing.T) {
			out := launch.NewCapture(2)
			env := []string{rankEnv + "=rma:dead", "AMIGO_TRANSPORT=" + over, "GORACE=atexit_sleep_ms=0",
				"AMIGO_SPIN=50", "AMIGO_YIELD=50", "AMIGO_MPI_TEST_TIMEOUT=120s"}
			if over == "tcp" {
				env = append(env, "AMIGO_TCP_TIMEOUT=2s")
			}
			job, err := launch.Start(launch.Options{N: 2, Argv: []string{os.Args[0]}, Env: env, Output: out.Output, KeepGoing: true})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			err = job.Wait(ctx)
			var ee *launch.ExitErrors
			if !errors.As(err, &ee) || !slices.Equal(ee.Ranks, []int{1}) || !strings.Contains(ee.Errs[0].Error(), "killed") {
				t.Fatalf("%v, want rank 1 killed only\n%s", err, out.All())
			}
		})
	}
}

// deadBound is how soon rank 0 must learn of rank 1's death, from the
// last accumulate that succeeded.
const deadBound = 15 * time.Second

func rmaDeadTarget(ctx context.Context, c *mpi.Comm) error {
	const victim = 1
	if c.Size() != 2 {
		return fmt.Errorf("rma:dead runs on 2 ranks, not %d", c.Size())
	}
	w, err := mpi.WinAllocate(ctx, c, 8*2048, 8)
	if err != nil {
		return err
	}
	if err := c.Barrier(ctx); err != nil {
		return err
	}
	if c.Rank() == victim {
		if _, err := c.Recv(ctx, nil, 0, 5); err != nil {
			return err
		}
		die()
	}
	if err := w.Lock(ctx, mpi.LockShared, victim); err != nil {
		return err
	}
	ones := fill(2000, int64(1))
	start := time.Now()
	for i := 0; ; i++ {
		last := time.Now()
		err := mpi.Accumulate(w, ones, victim, 0, mpi.Sum)
		if err == nil {
			err = w.Flush(ctx, victim)
		}
		if err != nil {
			took := time.Since(last)
			if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return fmt.Errorf("the accumulate failed only when the context ended: %v", err)
			}
			if took > deadBound || !strings.Contains(err.Error(), "rank 1") {
				return fmt.Errorf("accumulate on the dead rank: %v after %v, want a failure of rank 1 within %v", err, took, deadBound)
			}
			break
		}
		if i == 10 {
			if err := c.Send(ctx, nil, victim, 5); err != nil {
				return err
			}
		}
		if time.Since(start) > 2*deadBound {
			return fmt.Errorf("accumulates on rank 1 went on succeeding for %v after it was told to die", time.Since(start))
		}
	}
	// The lock on the dead rank: released with an error, promptly too.
	last := time.Now()
	if err := w.Unlock(ctx, victim); err == nil || time.Since(last) > deadBound {
		return fmt.Errorf("Unlock of the dead rank: %v after %v", err, time.Since(last))
	}
	return nil
}
