package amigo_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/amigotest"
	"github.com/amigo-hpc/amigo/transport/ofi"
)

// AMIGO_TRANSPORT=ofi is refused with a clear reason in a build without the
// libfabric adapter; with it (-tags ofi), ranks exchange messages of every
// size over it, inline and fetched by GET, on each provider tested here.
func TestTransportOFI(t *testing.T) {
	if !ofi.Compiled {
		_, err := amigo.Settings(amigo.Config{Transport: "ofi"})
		if !errors.Is(err, ofi.ErrNotCompiled) {
			t.Fatalf("Transport ofi in a build without it: %v, want %v", err, ofi.ErrNotCompiled)
		}
		return
	}
	provs := []string{"tcp;ofi_rxm", "shm"}
	if v := os.Getenv("AMIGO_OFI_PROVIDER"); v != "" {
		provs = []string{v}
	}
	for _, prov := range provs {
		t.Run(prov, func(t *testing.T) {
			cfg := amigo.Config{OFI: amigo.OFIConfig{Provider: prov}}
			// 8192: the default inline limit, above what half a descriptor
			// buffer of the ofi_rxm links holds.
			sizes := []int{0, 8, 1000, 8192, 20000, 300000}
			amigotest.Run(t, 2, amigotest.Options{Config: cfg, Over: "ofi"}, func(r *amigotest.Rank) error {
				if !slices.Contains(r.Adapters(), "ofi") {
					return fmt.Errorf("adapters %v, want ofi", r.Adapters())
				}
				c := r.Ctx
				arrived, got := 0, 0
				var bad error
				c.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
					// Handlers run in the order of the sends; a fetched
					// message completes later.
					i := arrived
					arrived++
					want := fill(make([]byte, sizes[i%len(sizes)]), i)
					buf := make([]byte, m.Size())
					check := func(err error) {
						if err == nil && !bytes.Equal(buf, want) {
							err = fmt.Errorf("message %d of %d bytes corrupt", i, len(want))
						}
						if err != nil && bad == nil {
							bad = err
						}
						got++
					}
					if m.Inline() {
						copy(buf, m.Data)
						check(nil)
						return
					}
					if err := m.Receive(buf, check); err != nil && bad == nil {
						bad = err
					}
				})
				if err := r.Barrier(); err != nil {
					return err
				}
				k := amigo.NewCounter()
				for i, n := range sizes {
					k.Add(1)
					if err := c.Send(amigo.EndpointOf(1-r.Rank()), 1, nil, fill(make([]byte, n), i), k.Done()); err != nil {
						return err
					}
				}
				if err := c.WaitCounter(r.Deadline, k); err != nil {
					return err
				}
				if err := c.Wait(r.Deadline, func() bool { return got == len(sizes) || bad != nil }); err != nil {
					return fmt.Errorf("received %d/%d: %w", got, len(sizes), err)
				}
				if bad != nil {
					return bad
				}
				return r.Barrier()
			})
		})
	}
}

// Over ofi_rxm the adapter's links hold packets of half their smaller
// descriptor buffers: a multicast whose request (its targets and header)
// would not fit is refused with ErrTooLarge, not written as a descriptor
// the link's reader takes for corrupt; and the inline limit fits too.
func TestOFIPacketsFitLinks(t *testing.T) {
	if !ofi.Compiled {
		return
	}
	cfg := amigo.Config{OFI: amigo.OFIConfig{Provider: "tcp;ofi_rxm"}}
	amigotest.Run(t, 2, amigotest.Options{Config: cfg, Over: "ofi"}, func(r *amigotest.Rank) error {
		c := r.Ctx
		if c.Endpoint().Rank != 0 {
			return nil
		}
		if got := c.Client().Limits().InlineMax; got >= 8192 {
			return fmt.Errorf("inline limit %d over ofi_rxm links of %d-byte packets at most", got, 8192-8)
		}
		err := c.MulticastWith(&amigo.MulticastParams{
			Targets:  []amigo.Endpoint{{Rank: 1}},
			Dispatch: 1,
			Header:   make([]byte, 10000),
		})
		if !errors.Is(err, amigo.ErrTooLarge) {
			return fmt.Errorf("multicast with a 10000-byte header: %v, want ErrTooLarge", err)
		}
		return nil
	})
}

// Over ofi a small Send with no done callback on a link with nothing in
// flight goes to the provider at once, outside the descriptor buffer
// (transport.Link.SendNow): a ping-pong's messages do, and so does the
// first of a window, the rest going through the buffer behind it. Every
// message arrives once, in the order sent, and a Fence after them
// completes: the packets sent at once count as transferred once the
// target took them.
func TestOFISendNow(t *testing.T) {
	if !ofi.Compiled {
		return
	}
	provs := []string{"tcp;ofi_rxm", "shm"}
	if v := os.Getenv("AMIGO_OFI_PROVIDER"); v != "" {
		provs = []string{v}
	}
	const pings, window = 200, 32
	for _, prov := range provs {
		t.Run(prov, func(t *testing.T) {
			cfg := amigo.Config{OFI: amigo.OFIConfig{Provider: prov}}
			amigotest.Run(t, 2, amigotest.Options{Config: cfg, Over: "ofi"}, func(r *amigotest.Rank) error {
				c := r.Ctx
				peer := amigo.EndpointOf(1 - r.Rank())
				var got []uint64
				c.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
					got = append(got, binary.LittleEndian.Uint64(m.Data))
				})
				if err := r.Barrier(); err != nil {
					return err
				}
				var b [8]byte
				sent := uint64(0)
				send := func() error {
					sent++
					binary.LittleEndian.PutUint64(b[:], sent)
					return c.Send(peer, 1, nil, b[:], nil)
				}
				wait := func(n int) error {
					return c.Wait(r.Deadline, func() bool { return len(got) >= n })
				}
				// A ping-pong: rank 0 sends, rank 1 answers.
				for i := 1; i <= pings; i++ {
					if r.Rank() == 0 {
						if err := send(); err != nil {
							return err
						}
						if err := wait(i); err != nil {
							return err
						}
					} else {
						if err := wait(i); err != nil {
							return err
						}
						if err := send(); err != nil {
							return err
						}
					}
				}
				// Windows from both sides at once, each fenced.
				for w := 0; w < 4; w++ {
					for i := 0; i < window; i++ {
						if err := send(); err != nil {
							return err
						}
					}
					fenced := false
					var ferr error
					if err := c.Fence(peer, func(err error) { fenced, ferr = true, err }); err != nil {
						return err
					}
					if err := c.Wait(r.Deadline, func() bool { return fenced }); err != nil {
						return fmt.Errorf("window %d: the fence did not complete: %w", w, err)
					}
					if ferr != nil {
						return fmt.Errorf("window %d: fence: %w", w, ferr)
					}
				}
				// A holder's message sent at once is still unsent for
				// Held.Unsent: the provider may keep it until its
				// progress, which the next Advance runs.
				h := c.Hold()
				h.Advance()
				before := c.Stats().SentAtOnce
				sent++
				binary.LittleEndian.PutUint64(b[:], sent)
				if err := h.SendImmediate(peer, 1, nil, b[:]); err != nil {
					h.Release()
					return err
				}
				atOnce, unsent := c.Stats().SentAtOnce-before, h.Unsent()
				h.Advance()
				after := h.Unsent()
				h.Release()
				if atOnce != 1 {
					return fmt.Errorf("the holder's message on a quiet link: %d sent at once, want 1", atOnce)
				}
				if !unsent {
					return errors.New("a message sent at once was not unsent for Held.Unsent")
				}
				if after {
					return errors.New("Held.Unsent after an Advance")
				}
				if err := wait(int(sent)); err != nil {
					return fmt.Errorf("received %d of %d: %w", len(got), sent, err)
				}
				for i, v := range got {
					if v != uint64(i+1) {
						return fmt.Errorf("message %d carries %d", i+1, v)
					}
				}
				if len(got) != int(sent) {
					return fmt.Errorf("received %d messages, want %d", len(got), sent)
				}
				st := c.Stats()
				if st.SentAtOnce == 0 || st.SentAtOnce >= st.SentInline {
					return fmt.Errorf("%d of %d inline messages sent at once: want some, not all (a window's go through the buffer)", st.SentAtOnce, st.SentInline)
				}
				return r.Barrier()
			})
		})
	}
}

// Messages posted from another goroutine (SendImmediate) take the same
// way at once: the poster injects each itself while the owner reads Stats
// (it advances only while the poster waits for an answer, so the context
// is free when the poster sends), each once the answer to the one before
// came back. The count of messages sent at once is shared between the two
// goroutines (run with -race). Then the same with the context held by the
// owner: the poster's messages (SendImmediate and Send) are queued, and
// injected at once from the queue.
func TestOFISendNowFromPoster(t *testing.T) {
	if !ofi.Compiled {
		return
	}
	const n = 500
	cfg := amigo.Config{OFI: amigo.OFIConfig{Provider: "shm"}}
	if v := os.Getenv("AMIGO_OFI_PROVIDER"); v != "" {
		cfg.OFI.Provider = v
	}
	amigotest.Run(t, 2, amigotest.Options{Config: cfg, Over: "ofi"}, func(r *amigotest.Rank) error {
		c := r.Ctx
		var got atomic.Int64
		c.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
			got.Add(1)
			if r.Rank() == 1 {
				_ = c.SendImmediate(amigo.EndpointOf(0), 1, nil, m.Data)
			}
		})
		if err := r.Barrier(); err != nil {
			return err
		}
		if r.Rank() == 1 {
			if err := c.Wait(r.Deadline, func() bool { return got.Load() == 2*n }); err != nil {
				return fmt.Errorf("received %d of %d: %w", got.Load(), 2*n, err)
			}
			return r.Barrier()
		}
		// sent is how many the poster sent; answered how many answers
		// the owner saw through.
		var sent, answered atomic.Int64
		posted := make(chan error, 1)
		go func() {
			var b [8]byte
			for i := int64(0); i < n; i++ {
				binary.LittleEndian.PutUint64(b[:], uint64(i))
				if err := c.SendImmediate(amigo.EndpointOf(1), 1, nil, b[:]); err != nil {
					posted <- err
					return
				}
				sent.Store(i + 1)
				for answered.Load() <= i {
					if r.Deadline.Err() != nil {
						posted <- fmt.Errorf("answer %d: %w", i, r.Deadline.Err())
						return
					}
					runtime.Gosched()
				}
			}
			posted <- nil
		}()
		var perr error
		for finished := false; !finished; {
			select {
			case perr = <-posted:
				finished = true
			default:
			}
			if k := sent.Load(); k > answered.Load() {
				if err := c.Wait(r.Deadline, func() bool { return got.Load() >= k }); err != nil {
					return fmt.Errorf("answer %d: %w", k, err)
				}
				answered.Store(k)
			}
			_ = c.Stats().SentAtOnce
		}
		if perr != nil {
			return perr
		}
		st := c.Stats()
		if st.SentAtOnce < n/2 {
			return fmt.Errorf("%d of %d messages (%d inline) sent at once, want most", st.SentAtOnce, n, st.SentInline)
		}
		// Now the poster finds the context held: its message is queued,
		// and the owner's next pass injects it, at once as well.
		for i := int64(n); i < 2*n; i++ {
			h := c.Hold()
			go func() {
				b := binary.LittleEndian.AppendUint64(nil, uint64(i))
				if i%2 == 0 {
					posted <- c.SendImmediate(amigo.EndpointOf(1), 1, nil, b)
				} else {
					posted <- c.Send(amigo.EndpointOf(1), 1, nil, b, nil) // b stays amigo's
				}
			}()
			if err := <-posted; err != nil {
				h.Release()
				return err
			}
			if !h.Queued() {
				h.Release()
				return fmt.Errorf("message %d: not queued behind the holder", i)
			}
			err := h.Wait(r.Deadline, func() bool { return got.Load() > i })
			h.Release()
			if err != nil {
				return fmt.Errorf("answer %d: %w", i, err)
			}
		}
		if queued := c.Stats().SentAtOnce - st.SentAtOnce; queued < 3*n/4 {
			return fmt.Errorf("%d of %d queued messages (SendImmediate and Send) sent at once, want most", queued, n)
		}
		return r.Barrier()
	})
}
