package shm_test

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/transport"
	"github.com/amigo-hpc/amigo/transport/shm"
)

// Small GETs and PUTs toward one owner move together in one cross-memory
// attach call: every byte lands where its descriptor says, a descriptor
// whose key the owner withdrew fails alone with ErrBadKey (it ends the
// batch before it; the ones after it form another), and the calls are
// counted.
func TestBatchedCMA(t *testing.T) {
	ads, regs := world(t, 2, shm.Options{RDMASlots: 64})
	defer ads[0].Close()
	defer ads[1].Close()
	p0, err := ads[0].Open(0, transport.NewDoorbell())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ads[1].Open(0, transport.NewDoorbell()); err != nil {
		t.Fatal(err)
	}
	l, err := p0.Link(transport.Addr{Rank: 1})
	if err != nil {
		t.Fatal(err)
	}
	const k, size, bad = 24, 16 << 10, 11
	mems := make([][]byte, k)
	keys := make([]transport.Key, k)
	for i := range mems {
		mems[i] = make([]byte, size+i) // sizes differ: no piece is mistaken for another
		for j := range mems[i] {
			mems[i][j] = byte(i*7 + j*3)
		}
		if keys[i], err = regs[1].Register(mems[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := regs[1].Deregister(keys[bad]); err != nil {
		t.Fatal(err)
	}
	q := l.RDMA
	var tail uint64
	run := func(kind transport.RDMAKind, local [][]byte) []error {
		t.Helper()
		start := tail
		for i := range local {
			op := q.Slot(tail)
			op.Kind, op.Local, op.Key, op.Off = kind, local[i], keys[i], 8
			tail++
		}
		q.Publish(tail) // all at once: the engine finds them queued together
		deadline := time.Now().Add(30 * time.Second)
		for q.TransferCounter().Load() != tail {
			if time.Now().After(deadline) {
				t.Fatal("transfers did not complete")
			}
			p0.Progress()
		}
		errs := make([]error, len(local))
		for i := range local {
			errs[i] = q.Status(start + uint64(i))
		}
		return errs
	}

	before := ads[0].Stats()
	local := make([][]byte, k)
	for i := range local {
		local[i] = make([]byte, len(mems[i])-8)
	}
	for i, err := range run(transport.Get, local) {
		switch {
		case i == bad && !errors.Is(err, transport.ErrBadKey):
			t.Fatalf("GET %d with a withdrawn key: %v, want ErrBadKey", i, err)
		case i != bad && err != nil:
			t.Fatalf("GET %d: %v", i, err)
		case i != bad && !bytes.Equal(local[i], mems[i][8:]):
			t.Fatalf("GET %d moved the wrong bytes", i)
		}
	}
	after := ads[0].Stats()
	if n := after.CMABatches - before.CMABatches; n < 2 {
		t.Fatalf("%d batched calls for %d GETs split by a bad key, want at least 2", n, k)
	}
	want := uint64(0)
	for i := range local {
		if i != bad {
			want += uint64(len(local[i]))
		}
	}
	if got := after.CMA - before.CMA; got != want {
		t.Fatalf("cross-memory attach moved %d bytes, want %d", got, want)
	}

	for i := range local {
		for j := range local[i] {
			local[i][j] = byte(i + j*5)
		}
	}
	for i, err := range run(transport.Put, local) {
		switch {
		case i == bad && !errors.Is(err, transport.ErrBadKey):
			t.Fatalf("PUT %d with a withdrawn key: %v, want ErrBadKey", i, err)
		case i != bad && err != nil:
			t.Fatalf("PUT %d: %v", i, err)
		case i != bad && !bytes.Equal(local[i], mems[i][8:]):
			t.Fatalf("PUT %d moved the wrong bytes", i)
		}
	}
	if ads[0].Stats().CMABatches == after.CMABatches {
		t.Fatal("the PUTs were not batched")
	}
}

// deregisterUnderBatch registers a region of rank 1, has rank 0 hold the
// claim of a batch toward it (accessAll), deregisters the region on
// another goroutine and checks that the deregistration waits. It returns
// rank 0's adapter, the deregistration's outcome and the claim's release.
func deregisterUnderBatch(t *testing.T) (*shm.Adapter, <-chan error, func()) {
	ads, regs := world(t, 2, shm.Options{})
	t.Cleanup(func() {
		ads[0].Close()
		ads[1].Close()
	})
	key, err := regs[1].Register(make([]byte, 4096))
	if err != nil {
		t.Fatal(err)
	}
	release := shm.ClaimAll(ads[0], 1, 0)
	done := make(chan error, 1)
	go func() { done <- regs[1].Deregister(key) }()
	// The owner withdrew the entry; it now waits for the claim.
	for shm.MirrorState(ads[1], uint64(key)) != 0 {
		time.Sleep(100 * time.Microsecond)
	}
	select {
	case err := <-done:
		release()
		t.Fatalf("deregistration returned (%v) while the batch under way held its claim", err)
	case <-time.After(50 * time.Millisecond):
	}
	return ads[0], done, release
}

// A deregistration waits while a peer holds the claim of a batch, which
// covers every key of the owner, and returns once it is released.
func TestDeregisterWaitsForBatch(t *testing.T) {
	_, done, release := deregisterUnderBatch(t)
	release()
	returnsOnRelease(t, done)
}

// returnsOnRelease waits for the outcome of a deregistration whose claim
// was released, which must be nil.
func returnsOnRelease(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("deregistration did not return once the claim was released")
	}
}

// A deregistration waits for the batch under way when it withdrew the
// key, not for a moment with no batch: a window of messages fetched in
// batches claims the slot again as soon as a batch ends, and a
// deregistration that waited for the slot to be clear waited as long as
// the window lasted. Here the slot is never clear: the batches end and
// start again until the deregistration returns.
func TestDeregisterSeesBatchEnd(t *testing.T) {
	a0, done, release := deregisterUnderBatch(t)
	defer release()
	deadline := time.After(30 * time.Second)
	for batches := 1; ; batches++ {
		shm.ReclaimAll(a0, 1, 0)
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			return
		case <-deadline:
			t.Fatalf("deregistration still waiting after %d batches, the slot never clear between them", batches)
		case <-time.After(100 * time.Microsecond):
		}
	}
}

// A window of mid-size GETs or PUTs toward an owner that is advancing is
// split with it: the initiator moves the front half of each descriptor in
// one call and the owner the back halves in one of its own, and every byte
// lands where its descriptor says. Toward an owner that does not advance,
// the initiator moves both halves.
func TestBatchedCoop(t *testing.T) {
	ads, regs := world(t, 2, shm.Options{RDMASlots: 64})
	defer ads[0].Close()
	defer ads[1].Close()
	p0, p1 := ports(t, ads)
	l, err := p0.Link(transport.Addr{Rank: 1})
	if err != nil {
		t.Fatal(err)
	}
	const k, size = 20, 40 << 10
	mems := make([][]byte, k)
	keys := make([]transport.Key, k)
	for i := range mems {
		mems[i] = make([]byte, size+i*1000)
		if keys[i], err = regs[1].Register(mems[i]); err != nil {
			t.Fatal(err)
		}
	}
	fill := func(b []byte, seed int) {
		for j := range b {
			b[j] = byte(seed*13 + j*7 + j>>12)
		}
	}
	var tail uint64
	run := func(kind transport.RDMAKind, local [][]byte) {
		t.Helper()
		runWindow(t, p0, l.RDMA, &tail, kind, local, keys, mems)
	}
	local := make([][]byte, k)
	for i := range local {
		local[i] = make([]byte, len(mems[i])-8)
	}

	// The owner advances, and the initiator leaves it the back halves.
	stopOwner := advanceOwner(p1)
	restore := shm.CoopOwnerOnly()
	for round := range 3 {
		for i := range mems {
			fill(mems[i], round*k+i)
		}
		s0, s1 := ads[0].Stats(), ads[1].Stats()
		run(transport.Get, local)
		if ads[0].Stats().CoopBatches == s0.CoopBatches || ads[1].Stats().Helped == s1.Helped {
			t.Fatalf("round %d: GETs not split with the owner (batches %d, owner moved %d bytes)", round,
				ads[0].Stats().CoopBatches-s0.CoopBatches, ads[1].Stats().Helped-s1.Helped)
		}
		for i := range local {
			fill(local[i], 1000+round*k+i)
		}
		s0, s1 = ads[0].Stats(), ads[1].Stats()
		run(transport.Put, local)
		if ads[0].Stats().CoopBatches == s0.CoopBatches || ads[1].Stats().Helped == s1.Helped {
			t.Fatalf("round %d: PUTs not split with the owner", round)
		}
	}
	restore()
	stopOwner()

	// The owner's contexts do not advance: the initiator moves it all.
	for i := range mems {
		fill(mems[i], 77+i)
	}
	s0 := ads[0].Stats()
	run(transport.Get, local)
	if ads[0].Stats().CoopBatches == s0.CoopBatches {
		t.Fatal("GETs toward an idle owner were not offered to it")
	}
}

// runWindow queues one descriptor of kind a buffer of local, toward keys at
// offset 8, publishes them together (so that the engine finds them queued
// one after the other), drives p0 until they complete, and checks that
// each succeeded and that local and mems[8:] hold the same bytes.
func runWindow(t *testing.T, p0 transport.Port, q *transport.RDMAQueue, tail *uint64, kind transport.RDMAKind, local [][]byte, keys []transport.Key, mems [][]byte) {
	t.Helper()
	start := *tail
	for i := range local {
		op := q.Slot(*tail)
		op.Kind, op.Local, op.Key, op.Off = kind, local[i], keys[i], 8
		*tail++
	}
	q.Publish(*tail)
	deadline := time.Now().Add(30 * time.Second)
	for q.TransferCounter().Load() != *tail {
		if time.Now().After(deadline) {
			t.Fatal("transfers did not complete")
		}
		p0.Progress()
	}
	for i := range local {
		if err := q.Status(start + uint64(i)); err != nil {
			t.Fatalf("%v %d: %v", kind, i, err)
		}
		if !bytes.Equal(local[i], mems[i][8:]) {
			t.Fatalf("%v %d moved the wrong bytes", kind, i)
		}
	}
}

// Descriptors from 256 KiB up to 512 KiB queued together go in batches
// split with the owner, as smaller ones do; from 512 KiB each goes alone.
func TestBatchedCoopLarge(t *testing.T) {
	ads, regs := world(t, 2, shm.Options{RDMASlots: 64})
	defer ads[0].Close()
	defer ads[1].Close()
	p0, p1 := ports(t, ads)
	l, err := p0.Link(transport.Addr{Rank: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer advanceOwner(p1)()
	defer shm.CoopOwnerOnly()()
	var tail uint64
	for _, c := range []struct {
		sizes   []int
		batched bool
	}{
		{[]int{256 << 10, 256 << 10, 256 << 10, 256 << 10, 256 << 10, 256 << 10, 256 << 10, 256 << 10}, true},
		{[]int{300 << 10, 384 << 10, 512<<10 - 4096, 320 << 10}, true},
		{[]int{512 << 10, 512 << 10, 600 << 10}, false},
	} {
		mems := make([][]byte, len(c.sizes))
		keys := make([]transport.Key, len(c.sizes))
		local := make([][]byte, len(c.sizes))
		for i, n := range c.sizes {
			mems[i] = make([]byte, n+8)
			for j := range mems[i] {
				mems[i][j] = byte(i*11 + j*7 + j>>12)
			}
			if keys[i], err = regs[1].Register(mems[i]); err != nil {
				t.Fatal(err)
			}
			local[i] = make([]byte, n)
		}
		s0, s1 := ads[0].Stats(), ads[1].Stats()
		runWindow(t, p0, l.RDMA, &tail, transport.Get, local, keys, mems)
		batches, helped := ads[0].Stats().CoopBatches-s0.CoopBatches, ads[1].Stats().Helped-s1.Helped
		switch {
		case c.batched && (batches == 0 || helped == 0):
			t.Fatalf("GETs of %v: %d batches split with the owner, the owner moved %d bytes; want both", c.sizes, batches, helped)
		case !c.batched && batches != 0:
			t.Fatalf("GETs of %v: %d batches split with the owner, want each alone", c.sizes, batches)
		}
		for _, k := range keys {
			if err := regs[1].Deregister(k); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// advanceOwner runs p's Progress in a loop, as an owner that advances,
// until the returned function is called; that returns once the loop ended.
func advanceOwner(p transport.Port) (stop func()) {
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			default:
				p.Progress()
			}
		}
	}()
	return func() { close(quit); <-done }
}

// DeregisterAll withdraws every key from the mirror before it waits, and
// then waits, as Deregister does, for a peer's claim of one of the keys
// and for a batch's claim of every key.
func TestDeregisterAllWaitsForClaims(t *testing.T) {
	for _, claim := range []string{"key", "batch"} {
		t.Run(claim, func(t *testing.T) {
			ads, regs := world(t, 2, shm.Options{})
			t.Cleanup(func() {
				ads[0].Close()
				ads[1].Close()
			})
			keys := make([]transport.Key, 4)
			for i := range keys {
				k, err := regs[1].Register(make([]byte, 4096))
				if err != nil {
					t.Fatal(err)
				}
				keys[i] = k
			}
			var release func()
			if claim == "key" {
				release = shm.ClaimKey(ads[0], 1, 0, uint64(keys[2]))
			} else {
				release = shm.ClaimAll(ads[0], 1, 0)
			}
			list := append([]transport.Key(nil), keys...)
			done := make(chan error, 1)
			go func() { done <- regs[1].DeregisterAll(list) }()
			// Every key is withdrawn while the claim holds, the ones after
			// the claimed key too.
			deadline := time.Now().Add(30 * time.Second)
			for _, k := range keys {
				for shm.MirrorState(ads[1], uint64(k)) != 0 {
					if time.Now().After(deadline) {
						release()
						t.Fatalf("key %d of %d still in the mirror while DeregisterAll waits", slices.Index(keys, k), len(keys))
					}
					time.Sleep(100 * time.Microsecond)
				}
			}
			select {
			case err := <-done:
				release()
				t.Fatalf("DeregisterAll returned (%v) while the %s claim held", err, claim)
			case <-time.After(50 * time.Millisecond):
			}
			release()
			returnsOnRelease(t, done)
			for _, k := range keys {
				if _, _, err := regs[1].Acquire(k, 0, 1); !errors.Is(err, transport.ErrBadKey) {
					t.Fatalf("Acquire after DeregisterAll: %v", err)
				}
			}
		})
	}
}
