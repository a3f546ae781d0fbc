package amigo_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/amigotest"
)

// A message sent the moment Open returned, to a peer that registers its
// handler 100 ms later, is held there and delivered once the handler is
// registered: inline sends (with and without callbacks), an immediate, and
// a large send announced by SEND or RTS, over every adapter; they arrive in
// the order sent.
func TestEarlyMessagesDelivered(t *testing.T) {
	for _, over := range []string{"loop", "shm", "tcp"} {
		for _, proto := range []string{"stop", "rendezvous"} {
			t.Run(over+"/"+proto, func(t *testing.T) {
				cfg := amigo.Config{Protocol: proto, InlineMax: 256}
				amigotest.Run(t, 2, amigotest.Options{Config: cfg, Over: over, Timeout: time.Minute}, earlyRank)
			})
		}
	}
}

const earlyDispatch = 5

func earlyRank(r *amigotest.Rank) error {
	c := r.Ctx
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	if r.Rank() == 0 {
		// Everything goes out before the peer has a handler.
		peer := amigo.EndpointOf(1)
		results := make([]error, 3)
		done := 0
		cb := func(i int) func(error) { return func(err error) { results[i] = err; done++ } }
		hdr := func(seq uint32) []byte { return binary.LittleEndian.AppendUint32(nil, seq) }
		if err := c.Send(peer, earlyDispatch, hdr(0), []byte("first"), nil); err != nil {
			return err
		}
		if err := c.SendImmediate(peer, earlyDispatch, hdr(1), []byte("second")); err != nil {
			return err
		}
		if err := c.Send(peer, earlyDispatch, hdr(2), []byte("third"), cb(0)); err != nil {
			return err
		}
		if err := c.SendWith(&amigo.SendParams{Dest: peer, Dispatch: earlyDispatch, Header: hdr(3), Data: []byte("fourth"), RemoteDone: cb(1)}); err != nil {
			return err
		}
		if err := c.Send(peer, earlyDispatch, hdr(4), big, cb(2)); err != nil {
			return err
		}
		if err := c.Wait(r.Deadline, func() bool { return done == 3 }); err != nil {
			return fmt.Errorf("rank 0: sends did not complete: %w", err)
		}
		if err := errors.Join(results...); err != nil {
			return fmt.Errorf("rank 0: %w", err)
		}
		if s := c.Stats(); s.RefusedByPeer != 0 {
			return fmt.Errorf("rank 0: %d messages refused", s.RefusedByPeer)
		}
		return r.Barrier()
	}
	// Rank 1 advances, without a handler, for 100 ms and until all five
	// messages were held.
	start := time.Now()
	if err := c.Wait(r.Deadline, func() bool {
		return time.Since(start) >= 100*time.Millisecond && c.Stats().HeldForDispatch == 5
	}); err != nil {
		return fmt.Errorf("rank 1: held %d messages: %w", c.Stats().HeldForDispatch, err)
	}
	var got []string
	buf := make([]byte, len(big))
	landed := false
	var landErr error
	c.SetDispatch(earlyDispatch, func(c *amigo.Context, m *amigo.Message) {
		seq := binary.LittleEndian.Uint32(m.Header)
		if m.Inline() {
			got = append(got, fmt.Sprintf("%d:%s", seq, m.Data))
			return
		}
		got = append(got, fmt.Sprintf("%d:%d bytes", seq, m.Size()))
		if err := m.Receive(buf, func(err error) { landErr, landed = err, true }); err != nil {
			landErr, landed = err, true
		}
	})
	if err := c.Wait(r.Deadline, func() bool { return landed }); err != nil {
		return fmt.Errorf("rank 1: got %q, large message not landed: %w", got, err)
	}
	if landErr != nil {
		return fmt.Errorf("rank 1: large message: %w", landErr)
	}
	want := fmt.Sprint([]string{"0:first", "1:second", "2:third", "3:fourth", fmt.Sprintf("4:%d bytes", len(big))})
	if fmt.Sprint(got) != want {
		return fmt.Errorf("rank 1: delivered %q, want %s", got, want)
	}
	if !bytes.Equal(buf, big) {
		return errors.New("rank 1: large message corrupted")
	}
	if s := c.Stats(); s.NoDispatch != 0 {
		return fmt.Errorf("rank 1: %d messages refused", s.NoDispatch)
	}
	return r.Barrier()
}

// Handlers given in Config are there before a peer can send: nothing is
// held.
func TestHandlersAtOpen(t *testing.T) {
	for _, over := range []string{"loop", "shm", "tcp"} {
		t.Run(over, func(t *testing.T) {
			var mu sync.Mutex
			got := map[int]int{}
			cfg := amigo.Config{Handlers: map[amigo.Dispatch]amigo.Handler{
				earlyDispatch: func(c *amigo.Context, m *amigo.Message) {
					mu.Lock()
					got[c.Client().Rank()]++
					mu.Unlock()
				},
			}}
			amigotest.Run(t, 3, amigotest.Options{Config: cfg, Over: over, Timeout: time.Minute}, func(r *amigotest.Rank) error {
				c := r.Ctx
				for p := 0; p < r.Size(); p++ {
					if err := c.SendImmediate(amigo.EndpointOf(p), earlyDispatch, nil, []byte("hi")); err != nil {
						return err
					}
				}
				if err := c.Wait(r.Deadline, func() bool {
					mu.Lock()
					defer mu.Unlock()
					return got[r.Rank()] == r.Size()
				}); err != nil {
					return err
				}
				if s := c.Stats(); s.HeldForDispatch != 0 || s.NoDispatch != 0 {
					return fmt.Errorf("rank %d: %d held, %d refused", r.Rank(), s.HeldForDispatch, s.NoDispatch)
				}
				return r.Barrier()
			})
		})
	}
	if _, err := amigo.NewLocal(1, amigo.Config{Handlers: map[amigo.Dispatch]amigo.Handler{amigo.MaxDispatch: func(*amigo.Context, *amigo.Message) {}}}); !errors.Is(err, amigo.ErrBadDispatch) {
		t.Fatalf("a handler for dispatch MaxDispatch: %v, want ErrBadDispatch", err)
	}
}

// A message whose handler never comes is refused once its grace ends: the
// sender of an inline message with no callback hears of it through
// OnError, in words that name both ends; a send that waits for remote
// completion gets ErrNoDispatch.
func TestEarlyGraceEnds(t *testing.T) {
	for _, over := range []string{"loop", "tcp"} {
		t.Run(over, func(t *testing.T) {
			var mu sync.Mutex
			var reports []string
			cfg := amigo.Config{DispatchGrace: 50 * time.Millisecond, OnError: func(err error) {
				var de *amigo.DispatchError
				if !errors.As(err, &de) || !errors.Is(err, amigo.ErrNoDispatch) {
					panic(fmt.Sprintf("OnError: %v", err))
				}
				mu.Lock()
				reports = append(reports, err.Error())
				mu.Unlock()
			}}
			amigotest.Run(t, 2, amigotest.Options{Config: cfg, Over: over, Timeout: time.Minute}, func(r *amigotest.Rank) error {
				c := r.Ctx
				if r.Rank() == 1 {
					// Advance until the grace of both messages ended.
					return c.Wait(r.Deadline, func() bool { return c.Stats().NoDispatch == 2 })
				}
				var remote error
				set := false
				if err := c.Send(amigo.EndpointOf(1), earlyDispatch, nil, []byte("lost?"), func(err error) {
					if err != nil {
						panic(err) // local completion succeeds
					}
				}); err != nil {
					return err
				}
				if err := c.SendWith(&amigo.SendParams{Dest: amigo.EndpointOf(1), Dispatch: earlyDispatch, Data: []byte("acked"),
					RemoteDone: func(err error) { remote, set = err, true }}); err != nil {
					return err
				}
				if err := c.Wait(r.Deadline, func() bool { return set && c.Stats().RefusedByPeer == 1 }); err != nil {
					return err
				}
				if !errors.Is(remote, amigo.ErrNoDispatch) {
					return fmt.Errorf("remote completion: %v, want ErrNoDispatch", remote)
				}
				return nil
			})
			// Once at the receiver, once at the sender (its RefusedByPeer).
			const want = "amigo: dispatch 5 from rank 0 at rank 1: no handler registered"
			if len(reports) != 2 || reports[0] != want || reports[1] != want {
				t.Errorf("OnError got %q, want twice %q", reports, want)
			}
		})
	}
}
