package amigo_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/amigotest"
)

// Bursts of small messages (sent with no Advance between them, so that
// they share slots as records) mixed with messages too large for a record,
// inline and announced, arrive whole and in order, over shared memory and
// in process. Burst lengths, sizes, kinds of send and the Advance calls
// between bursts come from a fixed seed; the ring is small, so that bursts
// meet a full ring and wrap it.
func TestSmallBurstsInOrder(t *testing.T) {
	for _, over := range []string{"shm", "loop"} {
		t.Run(over, func(t *testing.T) {
			cfg := amigo.Config{}
			amigotest.Run(t, 2, amigotest.Options{Config: cfg, Over: over}, func(r *amigotest.Rank) error {
				if r.Rank() == 0 {
					return burstSender(r)
				}
				return burstReceiver(r)
			})
		})
	}
}

const burstMessages = 20000

// burstMessage returns message i: its header and data.
func burstMessage(i int) (hdr, data []byte) {
	x := uint64(i)*0x9e3779b97f4a7c15 + 1
	x ^= x >> 29
	hdr = make([]byte, 8+int(x%3)*4)
	binary.LittleEndian.PutUint64(hdr, uint64(i))
	var n int
	switch x % 16 {
	case 0:
		n = 40 + int(x>>8)%80 // around the largest record and past one slot
	case 1:
		n = 20000 + int(x>>8)%1000 // announced or streamed
	default:
		n = int(x>>8) % 17 // records
	}
	data = make([]byte, n)
	for j := range data {
		data[j] = byte(i + j*7)
	}
	return hdr, data
}

func burstSender(r *amigotest.Rank) error {
	c := r.Ctx
	ep := amigo.EndpointOf(1)
	k := amigo.NewCounter()
	rnd := uint64(12345)
	next := func(m int) int {
		rnd ^= rnd << 13
		rnd ^= rnd >> 7
		rnd ^= rnd << 17
		return int(rnd % uint64(m))
	}
	// The first burst: small messages only, no Advance, and no more than
	// the ring holds. They must share slots.
	const first = 100
	before := amigo.Descriptors(c, ep)
	for i := 0; i < first; i++ {
		_, data := burstMessage(i)
		if len(data) > 16 {
			data = data[:16]
		}
		if err := c.SendImmediate(ep, 2, nil, data); err != nil {
			return err
		}
	}
	if n := amigo.Descriptors(c, ep) - before; n > first*2/3 {
		return fmt.Errorf("a burst of %d small messages took %d descriptors", first, n)
	}
	for i := 0; i < burstMessages; {
		burst := 1 + next(100)
		for j := 0; j < burst && i < burstMessages; j++ {
			hdr, data := burstMessage(i)
			var err error
			if len(data) <= 16 && next(2) == 0 {
				err = c.SendImmediate(ep, 1, hdr, data)
			} else {
				k.Add(1)
				err = c.Send(ep, 1, hdr, data, k.Done())
			}
			if err != nil {
				return fmt.Errorf("message %d: %w", i, err)
			}
			i++
		}
		for a := next(3); a > 0; a-- {
			c.Advance()
		}
	}
	if err := c.WaitCounter(r.Deadline, k); err != nil {
		return err
	}
	return r.Barrier()
}

func burstReceiver(r *amigotest.Rank) error {
	c := r.Ctx
	got := 0
	var bad error
	pending := 0
	small := 0
	c.SetDispatch(2, func(c *amigo.Context, m *amigo.Message) {
		if _, data := burstMessage(small); !bytes.Equal(m.Data, data[:min(len(data), 16)]) && bad == nil {
			bad = fmt.Errorf("small message %d: %x, want %x", small, m.Data, data[:min(len(data), 16)])
		}
		small++
	})
	c.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
		if bad != nil {
			return
		}
		hdr, data := burstMessage(got)
		i := got
		got++
		if !bytes.Equal(m.Header, hdr) {
			bad = fmt.Errorf("message %d: header %x, want %x", i, m.Header, hdr)
			return
		}
		if m.Inline() {
			if !bytes.Equal(m.Data, data) {
				bad = fmt.Errorf("message %d: %d bytes inline, want %d", i, len(m.Data), len(data))
			}
			return
		}
		buf := make([]byte, m.Size())
		pending++
		if err := m.Receive(buf, func(err error) {
			pending--
			if err == nil && !bytes.Equal(buf, data) {
				err = fmt.Errorf("%d bytes received, want %d", len(buf), len(data))
			}
			if err != nil && bad == nil {
				bad = fmt.Errorf("message %d: %w", i, err)
			}
		}); err != nil {
			bad = fmt.Errorf("message %d: %w", i, err)
		}
	})
	if err := c.Wait(r.Deadline, func() bool { return bad != nil || got == burstMessages && pending == 0 && small == 100 }); err != nil {
		return fmt.Errorf("%d of %d messages: %w", got, burstMessages, err)
	}
	if bad != nil {
		return bad
	}
	return r.Barrier()
}
