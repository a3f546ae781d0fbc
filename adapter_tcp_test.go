package amigo_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/amigotest"
	"github.com/amigo-hpc/amigo/transport"
)

// Every rank sends every other rank a stream of messages of mixed sizes over
// TCP, inline and by rendezvous (GET served by the sender's adapter); each
// arrives intact and in order.
func TestTCPAllToAll(t *testing.T) {
	const n, msgs = 4, 120
	sizes := []int{0, 1, 8, 100, 1000, 4000, 8000, 20000, 300000, 1 << 20}
	cfg := amigo.Config{RDMAChunk: 64 << 10}
	amigotest.Run(t, n, amigotest.Options{Config: cfg, Over: "tcp"}, func(r *amigotest.Rank) error {
		if !slices.Contains(r.Adapters(), "tcp") {
			return fmt.Errorf("adapters %v, want tcp", r.Adapters())
		}
		c := r.Ctx
		next := make([]int, n)
		var bad error
		fetched := 0
		c.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
			src := m.Source.Rank
			seq := int(binary.LittleEndian.Uint32(m.Header))
			if seq != next[src] && bad == nil {
				bad = fmt.Errorf("from %d: message %d, want %d", src, seq, next[src])
			}
			next[src]++
			want := fill(make([]byte, sizes[seq%len(sizes)]), src*1000+seq)
			if m.Inline() {
				if !bytes.Equal(m.Data, want) && bad == nil {
					bad = fmt.Errorf("from %d: message %d corrupt", src, seq)
				}
				fetched++
				return
			}
			buf := make([]byte, m.Size())
			if err := m.Receive(buf, func(err error) {
				if err == nil && !bytes.Equal(buf, want) {
					err = fmt.Errorf("from %d: message %d corrupt", src, seq)
				}
				if err != nil && bad == nil {
					bad = err
				}
				fetched++
			}); err != nil && bad == nil {
				bad = err
			}
		})
		if err := r.Barrier(); err != nil {
			return err
		}
		k := amigo.NewCounter()
		for seq := 0; seq < msgs; seq++ {
			for p := 0; p < n; p++ {
				if p == r.Rank() {
					continue
				}
				hdr := binary.LittleEndian.AppendUint32(nil, uint32(seq))
				data := fill(make([]byte, sizes[seq%len(sizes)]), r.Rank()*1000+seq)
				k.Add(1)
				if err := c.Send(amigo.EndpointOf(p), 1, hdr, data, k.Done()); err != nil {
					return err
				}
			}
		}
		if err := c.WaitCounter(r.Deadline, k); err != nil {
			return err
		}
		total := msgs * (n - 1)
		if err := c.Wait(r.Deadline, func() bool { return fetched == total || bad != nil }); err != nil {
			return fmt.Errorf("received %d/%d: %w", fetched, total, err)
		}
		if bad != nil {
			return bad
		}
		return r.Barrier()
	})
}

// Put and Get on a peer's registered memory over TCP move the bytes; a GET
// outside the region fails with an error naming the peer and touches
// nothing.
func TestTCPRMA(t *testing.T) {
	amigotest.Run(t, 2, amigotest.Options{Over: "tcp"}, func(r *amigotest.Rank) error {
		c := r.Ctx
		mem := make([]byte, 1<<20)
		fill(mem, r.Rank())
		reg, err := r.RegisterMemory(mem)
		if err != nil {
			return err
		}
		keys := make([]amigo.Key, 2)
		keys[r.Rank()] = reg.Key()
		c.SetDispatch(7, func(c *amigo.Context, m *amigo.Message) {
			keys[m.Source.Rank] = amigo.Key(binary.LittleEndian.Uint64(m.Data))
		})
		peer := 1 - r.Rank()
		if err := c.SendImmediate(amigo.EndpointOf(peer), 7, nil, binary.LittleEndian.AppendUint64(nil, uint64(reg.Key()))); err != nil {
			return err
		}
		if err := c.Wait(r.Deadline, func() bool { return keys[peer] != 0 }); err != nil {
			return err
		}
		if err := r.Barrier(); err != nil {
			return err
		}
		if r.Rank() == 0 {
			got := make([]byte, 300000)
			var getErr, putErr, outErr error
			done := 0
			c.Get(amigo.EndpointOf(1), got, keys[1], 400000, func(err error) { getErr = err; done++ })
			c.Put(amigo.EndpointOf(1), bytes.Repeat([]byte{0xAB}, 70000), keys[1], 5000, func(err error) { putErr = err; done++ })
			out := make([]byte, 100)
			for i := range out {
				out[i] = 0x5A
			}
			c.Get(amigo.EndpointOf(1), out, keys[1], 1<<20-50, func(err error) { outErr = err; done++ })
			if err := c.Wait(r.Deadline, func() bool { return done == 3 }); err != nil {
				return err
			}
			if getErr != nil || putErr != nil {
				return fmt.Errorf("get: %v, put: %v", getErr, putErr)
			}
			if want := fill(make([]byte, 1<<20), 1)[400000 : 400000+300000]; !bytes.Equal(got, want) {
				return errors.New("GET brought the wrong bytes")
			}
			var pe *amigo.PeerError
			if !errors.Is(outErr, transport.ErrBounds) || !errors.As(outErr, &pe) || pe.Addr.Rank != 1 {
				return fmt.Errorf("GET outside the region: %v, want a bounds error naming rank 1", outErr)
			}
			if !bytes.Equal(out, bytes.Repeat([]byte{0x5A}, 100)) {
				return errors.New("a refused GET wrote into the buffer")
			}
		}
		if err := r.Barrier(); err != nil {
			return err
		}
		if r.Rank() == 1 {
			want := fill(make([]byte, 1<<20), 1)
			copy(want[5000:], bytes.Repeat([]byte{0xAB}, 70000))
			if !bytes.Equal(mem, want) {
				return errors.New("PUT did not land where it should, or touched more")
			}
		}
		return r.Barrier()
	})
}
