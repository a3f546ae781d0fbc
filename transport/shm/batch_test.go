package shm_test

import (
	"bytes"
	"errors"
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

// A deregistration waits while a peer holds the claim of a batch, which
// covers every key of the owner, and returns once it is released.
func TestDeregisterWaitsForBatch(t *testing.T) {
	ads, regs := world(t, 2, shm.Options{})
	defer ads[0].Close()
	defer ads[1].Close()
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
		t.Fatalf("deregistration returned (%v) while a batch claim was held", err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("deregistration did not return once the claim was released")
	}
}
