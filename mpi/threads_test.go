package mpi_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/mpi"
)

// goroutines runs fn on n goroutines and returns the first error.
func goroutines(n int, fn func(g int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for g := 0; g < n; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[g] = fn(g)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// threadMsg is message i of goroutine g of rank src: its size varies
// between empty, inline and announced (rendezvous), and its bytes name
// all three.
func threadMsg(src, g, i int) []byte {
	n := [...]int{8, 0, 300, 20000, 9, 5000}[i%6]
	if n < 8 {
		return nil
	}
	b := pattern(n, src*1000+g*50+i)
	binary.LittleEndian.PutUint32(b, uint32(src<<24|g<<16|i))
	return b
}

// 8 goroutines per rank x 4 ranks exchange on one communicator: goroutine
// g of each rank sends its messages to goroutine g of every other rank,
// with tag g, mixing Send, Isend, Recv, Irecv and Wait (any goroutine
// waiting on any request). Every message
// arrives whole, from the right source, and in the order its goroutine
// sent it (MPI's non-overtaking order per source and tag).
func TestGoroutinesExchange(t *testing.T) {
	const ranks, perRank, rounds = 4, 8, 24
	run(t, ranks, func(ctx context.Context, w *mpi.Comm) error {
		r := w.Rank()
		return goroutines(perRank, func(g int) error {
			buf := make([]byte, 20000)
			for i := 0; i < rounds; i++ {
				var sends []mpi.Request
				for k := 1; k < ranks; k++ {
					dest := (r + k) % ranks
					if m := threadMsg(r, g, i); (i+g)%2 == 0 && len(m) <= 300 {
						// Blocking only where the message is copied: a
						// large Send waits for its receive, which this
						// goroutine posts after its sends.
						if err := w.Send(ctx, threadMsg(r, g, i), dest, g); err != nil {
							return err
						}
						continue
					}
					q, err := w.Isend(threadMsg(r, g, i), dest, g)
					if err != nil {
						return err
					}
					sends = append(sends, q)
				}
				for k := 1; k < ranks; k++ {
					src := (r - k + ranks) % ranks
					var st mpi.Status
					var err error
					if i%3 == 0 {
						q, qerr := w.Irecv(buf, src, g)
						if qerr != nil {
							return qerr
						}
						st, err = q.Wait(ctx)
					} else {
						st, err = w.Recv(ctx, buf, src, g)
					}
					if err != nil {
						return fmt.Errorf("goroutine %d round %d from %d: %w", g, i, src, err)
					}
					want := threadMsg(src, g, i)
					if st.Source != src || st.Tag != g || !bytes.Equal(buf[:st.Count], want) {
						return fmt.Errorf("goroutine %d round %d from %d: status %+v, data of another message", g, i, src, st)
					}
				}
				if err := mpi.Waitall(ctx, sends, nil); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// Collectives on several communicators at once, one goroutine each, while
// other goroutines of the same ranks exchange point-to-point: a goroutine
// blocked in a collective does not keep the others from progressing, and
// the ones that run without a schedule (Barrier, small Allreduce) share
// the engine with those that run one.
func TestGoroutinesCollectives(t *testing.T) {
	const ranks, comms, rounds = 4, 4, 20
	run(t, ranks, func(ctx context.Context, w *mpi.Comm) error {
		cs := make([]*mpi.Comm, comms)
		for i := range cs {
			d, err := w.Dup(ctx)
			if err != nil {
				return err
			}
			defer d.Free()
			cs[i] = d
		}
		return goroutines(comms+1, func(g int) error {
			if g == comms {
				// Point-to-point on the world meanwhile: a ring.
				r, p := w.Rank(), w.Size()
				out, in := make([]int64, 4), make([]int64, 4)
				for i := 0; i < 4*rounds; i++ {
					out[0] = int64(r*1000 + i)
					if _, err := mpi.Sendrecv(ctx, w, out, (r+1)%p, 5, in, (r-1+p)%p, 5); err != nil {
						return err
					}
					if in[0] != int64((r-1+p)%p*1000+i) {
						return fmt.Errorf("ring round %d: got %d", i, in[0])
					}
				}
				return nil
			}
			c := cs[g]
			for i := 0; i < rounds; i++ {
				if err := c.Barrier(ctx); err != nil {
					return err
				}
				n := []int{1, 8, 3000}[i%3]
				send, recv := make([]int64, n), make([]int64, n)
				for j := range send {
					send[j] = int64(c.Rank()*7 + j + g)
				}
				if err := mpi.Allreduce(ctx, c, send, recv, mpi.Sum); err != nil {
					return err
				}
				for j, v := range recv {
					if want := int64(7*(ranks*(ranks-1)/2) + ranks*(j+g)); v != want {
						return fmt.Errorf("comm %d round %d: element %d = %d, want %d", g, i, j, v, want)
					}
				}
				b := make([]int32, 5)
				if c.Rank() == i%ranks {
					for j := range b {
						b[j] = int32(i*10 + j + g)
					}
				}
				if err := mpi.Bcast(ctx, c, b, i%ranks); err != nil {
					return err
				}
				if b[4] != int32(i*10+4+g) {
					return fmt.Errorf("comm %d round %d: bcast got %v", g, i, b)
				}
			}
			return nil
		})
	})
}

// Goroutines that create communicators from different communicators at
// once each get a working one, with a context id of their own.
func TestGoroutinesCommCreate(t *testing.T) {
	const ranks, comms = 3, 4
	run(t, ranks, func(ctx context.Context, w *mpi.Comm) error {
		parents := make([]*mpi.Comm, comms)
		for i := range parents {
			d, err := w.Dup(ctx)
			if err != nil {
				return err
			}
			defer d.Free()
			parents[i] = d
		}
		made := make([]*mpi.Comm, comms)
		err := goroutines(comms, func(g int) error {
			d, err := parents[g].Dup(ctx)
			made[g] = d
			return err
		})
		if err != nil {
			return err
		}
		// Each new communicator isolates its messages: a message sent on
		// one is received on it only.
		return goroutines(comms, func(g int) error {
			c := made[g]
			defer c.Free()
			r, p := c.Rank(), c.Size()
			out, in := []int32{int32(g)}, []int32{-1}
			if _, err := mpi.Sendrecv(ctx, c, out, (r+1)%p, 0, in, (r-1+p)%p, 0); err != nil {
				return err
			}
			return check(in[0] == int32(g), "communicator %d received %d", g, in[0])
		})
	})
}

// Two goroutines of a rank may call World on its context at once: both get
// the same communicator, and the one that did not run the handshake waits
// for it in its first call.
func TestWorldFromTwoGoroutines(t *testing.T) {
	cl, err := amigo.NewLocal(2, amigo.Config{SpinIterations: 50, YieldIterations: 50})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range cl {
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var w0 [2]*mpi.Comm
	err = goroutines(3, func(g int) error {
		if g == 2 { // rank 1
			w, err := mpi.World(ctx, cl[1].Context(0), nil)
			if err != nil {
				return err
			}
			for tag := 0; tag < 2; tag++ {
				buf := []byte{0}
				if _, err := w.Recv(ctx, buf, 0, tag); err != nil || buf[0] != byte(10+tag) {
					return fmt.Errorf("rank 1 tag %d: %v %v", tag, buf, err)
				}
			}
			return nil
		}
		w, err := mpi.World(ctx, cl[0].Context(0), nil)
		if err != nil {
			return err
		}
		w0[g] = w
		return w.Send(ctx, []byte{byte(10 + g)}, 1, g)
	})
	if err != nil {
		t.Fatal(err)
	}
	if w0[0] != w0[1] {
		t.Error("two World calls on one context gave two communicators")
	}
}
