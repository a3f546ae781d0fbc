package fifo

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// engine is a test engine: it consumes descriptors only when told to, so a
// test decides exactly which transfers have completed.
type engine struct {
	head, xfer atomic.Uint64
	sizes      []int // slot counts of injected descriptors, in order
	next       int   // descriptors consumed
	failed     map[uint64]error
}

func (e *engine) consume(n int) {
	for i := 0; i < n; i++ {
		e.head.Add(uint64(e.sizes[e.next]))
		e.next++
		e.xfer.Add(1)
	}
}

type rec struct {
	order []int
	errs  []error
}

func (r *rec) cb(id int) Done {
	return Func(func(err error) {
		r.order = append(r.order, id)
		r.errs = append(r.errs, err)
	})
}

func newTracker(n int) (*Tracker, *engine) {
	e := &engine{}
	return New(n, &e.head, &e.xfer, nil), e
}

func inject(t *testing.T, tr *Tracker, e *engine, k int, cb Done) {
	t.Helper()
	if !tr.Space(k) {
		t.Fatalf("no space for %d slots (tail %d)", k, tr.Tail())
	}
	tr.Inject(k, cb)
	e.sizes = append(e.sizes, k)
}

// A callback must not run before the engine counted its transfer complete.
func TestNoCallbackBeforeTransfer(t *testing.T) {
	tr, e := newTracker(8)
	var r rec
	for i := 0; i < 4; i++ {
		inject(t, tr, e, 1, r.cb(i))
	}
	if n := tr.Complete(); n != 0 || len(r.order) != 0 {
		t.Fatalf("called %v with no transfer complete", r.order)
	}
	e.consume(2)
	if n := tr.Complete(); n != 2 || !slices.Equal(r.order, []int{0, 1}) {
		t.Fatalf("after 2 transfers: called %v", r.order)
	}
	if n := tr.Complete(); n != 0 {
		t.Fatalf("counter unchanged, but %d callbacks called", n)
	}
	e.consume(2)
	tr.Complete()
	if !slices.Equal(r.order, []int{0, 1, 2, 3}) || tr.Pending() != 0 {
		t.Fatalf("called %v, pending %d", r.order, tr.Pending())
	}
}

// The transfer counter is read once, as a snapshot, before the check: a
// transfer that completes while callbacks run waits for the next check.
func TestSnapshotBeforeCheck(t *testing.T) {
	tr, e := newTracker(8)
	var order []int
	inject(t, tr, e, 1, Func(func(error) {
		order = append(order, 0)
		e.consume(1) // the engine completes descriptor 1 meanwhile
	}))
	inject(t, tr, e, 1, Func(func(error) { order = append(order, 1) }))
	e.consume(1)
	if n := tr.Complete(); n != 1 || !slices.Equal(order, []int{0}) {
		t.Fatalf("first check called %v, want only the callback of the snapshot's transfer", order)
	}
	if n := tr.Complete(); n != 1 || !slices.Equal(order, []int{0, 1}) {
		t.Fatalf("second check called %v", order)
	}
}

// Callbacks run in injection order, across descriptors with and without
// callbacks and of several slots.
func TestCallbacksInOrder(t *testing.T) {
	tr, e := newTracker(32)
	var r rec
	want := []int{}
	for i := 0; i < 10; i++ {
		k := 1 + i%3
		if i%4 == 1 {
			inject(t, tr, e, k, nil)
			continue
		}
		inject(t, tr, e, k, r.cb(i))
		want = append(want, i)
	}
	for e.next < len(e.sizes) {
		e.consume(1)
		if e.next%3 == 0 {
			tr.Complete()
		}
	}
	tr.Complete()
	if !slices.Equal(r.order, want) {
		t.Fatalf("callbacks ran in order %v, want %v", r.order, want)
	}
}

// A slot whose transfer the engine finished but whose callback has not run
// yet is not free: injecting there would lose the callback.
func TestSlotNotReusedWhileCallbackPending(t *testing.T) {
	tr, e := newTracker(4)
	var r rec
	for i := 0; i < 4; i++ {
		inject(t, tr, e, 1, r.cb(i))
	}
	if tr.Space(1) {
		t.Fatal("space in a full FIFO")
	}
	e.consume(4) // the engine's head passed every slot
	if tr.Space(1) {
		t.Fatal("slot 0 free for injection while its callback is still listed")
	}
	tr.Complete()
	if !tr.Space(4) {
		t.Fatal("no space after every callback ran")
	}
	inject(t, tr, e, 1, r.cb(4))
	e.consume(1)
	tr.Complete()
	if !slices.Equal(r.order, []int{0, 1, 2, 3, 4}) {
		t.Fatalf("callbacks %v", r.order)
	}
}

// Slots without callbacks are free as soon as the engine passed them; only
// listed callbacks hold slots. A multi-slot descriptor needs every one of its
// slots free.
func TestSpaceIndicesAndNullSlots(t *testing.T) {
	tr, e := newTracker(8)
	var r rec
	inject(t, tr, e, 2, nil)
	inject(t, tr, e, 2, r.cb(1))
	inject(t, tr, e, 4, nil)
	if tr.Space(1) {
		t.Fatal("space with all 8 slots taken")
	}
	e.consume(1) // frees slots 0-1, no callback there
	if !tr.Space(2) || tr.Space(3) {
		t.Fatal("want exactly 2 free slots")
	}
	e.consume(2) // slots 2-3 hold a listed callback until Complete
	if tr.Space(3) {
		t.Fatal("a 3-slot descriptor would overwrite slot 2, whose callback is pending")
	}
	tr.Complete()
	if !tr.Space(8) {
		t.Fatal("want all 8 slots free")
	}
}

// With no callback pending the check costs a counter load and calls
// nothing, whatever the counter does.
func TestPendingCounter(t *testing.T) {
	tr, e := newTracker(8)
	inject(t, tr, e, 1, nil)
	inject(t, tr, e, 1, nil)
	if tr.Pending() != 0 {
		t.Fatalf("pending %d with no callbacks", tr.Pending())
	}
	e.consume(2)
	if n := tr.Complete(); n != 0 {
		t.Fatalf("called %d", n)
	}
	var r rec
	inject(t, tr, e, 1, r.cb(0))
	if tr.Pending() != 1 {
		t.Fatalf("pending %d, want 1", tr.Pending())
	}
	e.consume(1)
	tr.Complete()
	if tr.Pending() != 0 || len(r.order) != 1 {
		t.Fatal("pending callback not called")
	}
}

func TestStatusAndFail(t *testing.T) {
	e := &engine{}
	bad := errors.New("bad")
	tr := New(4, &e.head, &e.xfer, func(slot uint64) error {
		if slot == 1 {
			return bad
		}
		return nil
	})
	var r rec
	for i := 0; i < 3; i++ {
		inject(t, tr, e, 1, r.cb(i))
	}
	e.consume(2)
	tr.Complete()
	if !slices.Equal(r.order, []int{0, 1}) || r.errs[0] != nil || r.errs[1] != bad {
		t.Fatalf("order %v errs %v", r.order, r.errs)
	}
	gone := errors.New("peer gone")
	if n := tr.Fail(gone); n != 1 || r.errs[2] != gone || tr.Pending() != 0 {
		t.Fatalf("Fail called %d, errs %v", n, r.errs)
	}
}

// An engine on another goroutine consumes while the producer injects as
// fast as Space allows: every callback runs exactly once, in order, and
// never before its transfer.
func TestConcurrentEngine(t *testing.T) {
	const n = 64
	const total = 20000
	var head, xfer, tail atomic.Uint64
	sizes := make([]uint64, n) // slot count at each position, written before tail
	tr := New(n, &head, &xfer, nil)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		h := uint64(0)
		done := 0
		for done < total {
			if h == tail.Load() {
				continue
			}
			k := sizes[h%n]
			h += k
			head.Store(h)
			xfer.Add(1)
			done++
		}
	}()
	next := 0
	called := 0
	for i := 0; i < total; {
		tr.Complete()
		k := 1 + i%3
		if !tr.Space(k) {
			continue
		}
		pos := tr.Tail()
		if pos%n+uint64(k) > n {
			k = int(n - pos%n) // no wrapping in this test: fill to the end
		}
		sizes[pos%n] = uint64(k)
		id := i
		tr.Inject(k, Func(func(err error) {
			if id != next {
				t.Errorf("callback %d ran, want %d", id, next)
			}
			if uint64(id) >= xfer.Load() {
				t.Errorf("callback %d ran before its transfer", id)
			}
			next++
			called++
		}))
		tail.Store(tr.Tail())
		i++
	}
	wg.Wait()
	tr.Complete()
	if called != total {
		t.Fatalf("%d callbacks ran, want %d", called, total)
	}
}

// Space agrees with its definition, slot by slot: k slots from the tail are
// free when the engine's head has passed them and none holds a listed
// callback. Random descriptor sizes, callbacks on some, the engine and the
// completion checks running behind by random amounts, over many laps.
func TestSpaceMatchesDefinition(t *testing.T) {
	const n = 16
	for seed := uint64(1); seed <= 20; seed++ {
		rnd := seed
		next := func(m int) int {
			rnd ^= rnd << 13
			rnd ^= rnd >> 7
			rnd ^= rnd << 17
			return int(rnd % uint64(m))
		}
		tr, e := newTracker(n)
		var r rec
		id := 0
		for step := 0; step < 5000; step++ {
			k := 1 + next(n)
			want := tr.Tail()+uint64(k)-e.head.Load() <= n
			for i := uint64(0); want && i < uint64(k); i++ {
				if tr.list[(tr.Tail()+i)&(n-1)].cb != nil {
					want = false
				}
			}
			if got := tr.Space(k); got != want {
				t.Fatalf("seed %d step %d: Space(%d) = %v, by definition %v (tail %d, head %d, pending %d)", seed, step, k, got, want, tr.Tail(), e.head.Load(), tr.Pending())
			}
			switch next(4) {
			case 0, 1:
				if want {
					var cb Done
					if next(2) == 0 {
						cb = r.cb(id)
						id++
					}
					tr.Inject(k, cb)
					e.sizes = append(e.sizes, k)
				}
			case 2:
				if left := len(e.sizes) - e.next; left > 0 {
					e.consume(1 + next(left))
				}
			case 3:
				tr.Complete()
			}
		}
		if len(r.order) > 0 && !slices.IsSorted(r.order) {
			t.Fatalf("seed %d: callbacks out of order", seed)
		}
	}
}

// InjectOne is Space(1) and Inject(1, nil) in one: a twin tracker over the
// same engine, driven with the two calls, agrees with it at every step,
// through full FIFOs, slots held by listed callbacks and many laps.
func TestInjectOneMatchesSpaceInject(t *testing.T) {
	const n = 8
	rnd := uint64(7)
	next := func(m int) int {
		rnd ^= rnd << 13
		rnd ^= rnd >> 7
		rnd ^= rnd << 17
		return int(rnd % uint64(m))
	}
	e := &engine{}
	one := New(n, &e.head, &e.xfer, nil)
	two := New(n, &e.head, &e.xfer, nil)
	var r1, r2 rec
	fulls, holds := 0, 0
	for step := 0; step < 20000; step++ {
		switch next(5) {
		case 0, 1:
			want := two.Space(1)
			if !want && two.list[two.Tail()&(n-1)].cb != nil {
				holds++
			} else if !want {
				fulls++
			}
			pos, ok := one.InjectOne()
			if ok != want {
				t.Fatalf("step %d: InjectOne %v, Space(1) %v", step, ok, want)
			}
			if ok {
				if pos != two.Tail() {
					t.Fatalf("step %d: InjectOne at %d, tail %d", step, pos, two.Tail())
				}
				two.Inject(1, nil)
				e.sizes = append(e.sizes, 1)
			}
		case 2:
			// A descriptor with a callback, through the general calls on both.
			k := 1 + next(3)
			if two.Space(k) != one.Space(k) {
				t.Fatalf("step %d: the twins disagree on Space(%d)", step, k)
			}
			if two.Space(k) {
				one.Inject(k, r1.cb(step))
				two.Inject(k, r2.cb(step))
				e.sizes = append(e.sizes, k)
			}
		case 3:
			if left := len(e.sizes) - e.next; left > 0 {
				e.consume(1 + next(left))
			}
		case 4:
			if a, b := one.Complete(), two.Complete(); a != b {
				t.Fatalf("step %d: Complete called %d and %d", step, a, b)
			}
		}
		if one.Tail() != two.Tail() || one.Outstanding() != two.Outstanding() || one.Pending() != two.Pending() {
			t.Fatalf("step %d: tails %d/%d, outstanding %d/%d", step, one.Tail(), two.Tail(), one.Outstanding(), two.Outstanding())
		}
	}
	if fulls == 0 || holds == 0 {
		t.Fatalf("the run met %d full FIFOs and %d slots held by a callback: want both", fulls, holds)
	}
	if !slices.Equal(r1.order, r2.order) {
		t.Fatal("callbacks ran in different orders")
	}
}
