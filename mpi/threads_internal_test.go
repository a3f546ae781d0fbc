package mpi

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
)

// twoWorlds opens two in-process ranks and their worlds; they are freed
// and closed when t ends.
func twoWorlds(t *testing.T) (w0, w1 *Comm) {
	t.Helper()
	cl, err := amigo.NewLocal(2, amigo.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ws := make([]*Comm, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range cl {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ws[r], errs[r] = World(ctx, cl[r].Context(0), nil)
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for r, c := range cl {
			if ws[r] != nil {
				ws[r].Free()
			}
			c.Close()
		}
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return ws[0], ws[1]
}

// eventually waits, up to a bound, until cond holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting until %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// roles reports, with the engine locked, whether a goroutine has the
// progress role and how many sleep.
func (e *engine) roles() (driving bool, sleepers int) {
	e.lock()
	defer e.unlock()
	return e.driving, e.sleepers
}

type recvResult struct {
	st  Status
	err error
	buf []byte
}

func recvAsync(ctx context.Context, w *Comm, src, tag int) <-chan recvResult {
	ch := make(chan recvResult, 1)
	go func() {
		buf := make([]byte, 16)
		st, err := w.Recv(ctx, buf, src, tag)
		ch <- recvResult{st, err, buf[:st.Count]}
	}()
	return ch
}

func awaitRecv(t *testing.T, ch <-chan recvResult, want []byte) {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil || !bytes.Equal(r.buf, want) {
			t.Fatalf("Recv: %v, %q, want %q", r.err, r.buf, want)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Recv did not return")
	}
}

// The progress role passes from goroutine to goroutine in a fixed order,
// each step forced by the test: A waits first and drives; B, waiting
// too, sleeps; C, which only posts, gets the engine from the driver and
// returns while A keeps driving; A's message ends A's wait, and B takes
// the role on, alone, until its own message arrives; then nobody drives.
func TestProgressHandOff(t *testing.T) {
	w0, w1 := twoWorlds(t)
	e := w0.e
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	a := recvAsync(ctx, w0, 1, 1)
	eventually(t, "A drives", func() bool { d, _ := e.roles(); return d })
	b := recvAsync(ctx, w0, 1, 2)
	eventually(t, "B sleeps", func() bool { _, s := e.roles(); return s == 1 })

	// C posts while A drives and B sleeps: the driver lets it in.
	q, err := w0.Isend([]byte("from C"), 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if d, s := e.roles(); !d || s != 1 {
		t.Fatalf("after C's post: driving %v, %d sleepers; want A driving, B asleep", d, s)
	}

	if err := w1.Send(ctx, []byte("to A"), 0, 1); err != nil {
		t.Fatal(err)
	}
	awaitRecv(t, a, []byte("to A"))
	// A gave the role up and woke B, which took it on: B drives, and no
	// one sleeps.
	eventually(t, "B drives", func() bool { d, s := e.roles(); return d && s == 0 })
	select {
	case r := <-b:
		t.Fatalf("B returned before its message: %+v", r)
	default:
	}

	if err := w1.Send(ctx, []byte("to B"), 0, 2); err != nil {
		t.Fatal(err)
	}
	awaitRecv(t, b, []byte("to B"))
	eventually(t, "nobody drives", func() bool { d, s := e.roles(); return !d && s == 0 })

	// C's message went out while A drove.
	buf := make([]byte, 16)
	st, err := w1.Recv(ctx, buf, 0, 3)
	if err != nil || string(buf[:st.Count]) != "from C" {
		t.Fatalf("C's message: %v, %q", err, buf[:st.Count])
	}
	if _, err := q.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// Goroutines that find the engine locked for long park (after their
// spins), and each unlock hands the lock on until all of them had it:
// none is left parked with the engine free.
func TestLockParksAndWakes(t *testing.T) {
	w0, _ := twoWorlds(t)
	e := w0.e
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("waiters=%d", n), func(t *testing.T) {
			e.lock()
			done := make(chan error, n)
			for i := 0; i < n; i++ {
				go func() {
					_, _, err := w0.Iprobe(AnySource, AnyTag)
					done <- err
				}()
			}
			eventually(t, "every waiter parks", func() bool { return e.parked.Load() == int32(n) && e.want.Load() == int32(n) })
			select {
			case err := <-done:
				t.Fatalf("a waiter returned with the engine locked: %v", err)
			default:
			}
			e.unlock()
			for i := 0; i < n; i++ {
				select {
				case err := <-done:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(20 * time.Second):
					t.Fatalf("%d of %d waiters still wait, %d parked", n-i, n, e.parked.Load())
				}
			}
			if p, w := e.parked.Load(), e.want.Load(); p != 0 || w != 0 {
				t.Fatalf("%d parked, %d waiting after all returned", p, w)
			}
		})
	}
}

// A token left in the channel by an unlock whose waiter took the lock by
// its own try does not let a later waiter past a locked engine: it tries,
// finds the engine locked, and parks again.
func TestLockStaleToken(t *testing.T) {
	w0, _ := twoWorlds(t)
	e := w0.e
	e.park <- struct{}{}
	e.lock()
	done := make(chan error, 1)
	go func() {
		_, _, err := w0.Iprobe(AnySource, AnyTag)
		done <- err
	}()
	eventually(t, "the waiter takes the stale token and parks", func() bool { return e.parked.Load() == 1 && len(e.park) == 0 })
	select {
	case err := <-done:
		t.Fatalf("the waiter returned with the engine locked: %v", err)
	default:
	}
	e.unlock()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter still waits")
	}
}
