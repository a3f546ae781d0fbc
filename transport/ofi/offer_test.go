//go:build ofi

package ofi

import (
	"bytes"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/internal/fifo"
	"github.com/amigo-hpc/amigo/internal/ring"
	"github.com/amigo-hpc/amigo/internal/wire"
	"github.com/amigo-hpc/amigo/transport"
)

// A packet that announces a buffer the peer is to GET from (an RTS, a
// SEND above offerAbove) or PUT into (a STOP of the put variant) tells the
// peer where the region is before it is delivered: the peer's first GET
// or PUT on it asks nothing. Other announcements leave the peer to ask,
// once.
func TestKeyOffered(t *testing.T) {
	const size = 256 << 10
	cases := []struct {
		name  string
		put   func(b []byte, key transport.Key) int // encodes the announcement, returns its size
		asked uint64
	}{
		{"RTS", func(b []byte, key transport.Key) int {
			wire.PutRTS(b, 1, nil, 7, size, uint64(key))
			return wire.RTSSize(0)
		}, 0},
		{"SEND", func(b []byte, key transport.Key) int {
			wire.PutSEND(b, 1, nil, 7, size, uint64(key), false, false)
			return wire.SENDSize(0)
		}, 0},
		{"STOP-put", func(b []byte, key transport.Key) int {
			wire.PutSTOP(b, 7, wire.StopPut, uint64(key), 0)
			return wire.STOPSize
		}, 0},
		{"small SEND", func(b []byte, key transport.Key) int {
			wire.PutSEND(b, 1, nil, 7, offerAbove, uint64(key), false, false)
			return wire.SENDSize(0)
		}, 1},
		{"STOP-discard", func(b []byte, key transport.Key) int {
			wire.PutSTOP(b, 7, wire.StopDiscard, uint64(key), 0)
			return wire.STOPSize
		}, 1},
		{"none", nil, 1},
	}
	for _, prov := range providers() {
		t.Run(prov, func(t *testing.T) {
			ads, regs := newWorld(t, 2, Options{Provider: prov, Timeout: time.Minute})
			defer ads[0].Close()
			defer ads[1].Close()
			var ports [2]transport.Port
			var links [2]*transport.Link
			for r := range 2 {
				p, err := ads[r].Open(0, transport.NewDoorbell())
				if err != nil {
					t.Fatal(err)
				}
				ports[r] = p
			}
			for r := range 2 {
				l, err := ports[r].Link(transport.Addr{Rank: int32(1 - r)})
				if err != nil {
					t.Fatal(err)
				}
				links[r] = l
			}
			msg := fifo.New(links[0].Msg.Slots(), links[0].Msg.HeadCounter(), links[0].Msg.TransferCounter(), nil)
			q := links[1].RDMA
			rdma := fifo.New(q.Slots(), q.HeadCounter(), q.TransferCounter(), q.Status)
			var got cnt
			advance := func(what string, done func() bool) {
				deadline := time.Now().Add(time.Minute)
				for !done() {
					for r := range 2 {
						ports[r].Progress()
						ports[r].Poll(&got, 64)
					}
					msg.Complete()
					rdma.Complete()
					if time.Now().After(deadline) {
						t.Fatalf("%s: no progress in a minute", what)
					}
				}
			}
			// The keys the initiator asked for, read with its port taken
			// (the adapter's watcher may work on it).
			asked := func() uint64 {
				p := ports[1].(*port)
				p.enter()
				defer p.leave()
				return p.outs[0].asked
			}
			for i, c := range cases {
				mem := bytes.Repeat([]byte{byte(i + 1)}, size)
				key, err := regs[0].Register(mem)
				if err != nil {
					t.Fatal(err)
				}
				if c.put != nil {
					var b [64]byte
					n := c.put(b[:], key)
					k := ring.SlotsFor(n)
					tail := msg.Tail()
					if pad := links[0].Msg.PadFor(tail, k); pad > 0 {
						links[0].Msg.WritePad(tail, pad)
						msg.Inject(pad, nil)
						tail += uint64(pad)
					}
					copy(links[0].Msg.Payload(tail, n), b[:n])
					links[0].Msg.Seal(tail, n)
					msg.Inject(k, nil)
					links[0].Msg.Publish(msg.Tail())
					want := got.n + 1
					advance(c.name+": delivery", func() bool { return got.n >= want })
				}
				before := asked()
				local := make([]byte, size)
				kind := transport.Get
				if c.name == "STOP-put" {
					kind, local = transport.Put, bytes.Repeat([]byte{byte(i + 101)}, size)
				}
				op := q.Slot(rdma.Tail())
				*op = transport.RDMAOp{Kind: kind, Local: local, Key: key}
				rdma.Inject(1, nil)
				q.Publish(rdma.Tail())
				advance(c.name+": "+kind.String(), func() bool { return rdma.Outstanding() == 0 })
				if err := q.Status(rdma.Tail() - 1); err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				if kind == transport.Put {
					// The PUT's completion frees the local buffer; the
					// data lands in the region soon after.
					advance(c.name+": PUT landing", func() bool { return bytes.Equal(mem, local) })
				} else if !bytes.Equal(local, mem) {
					t.Fatalf("%s: GET brought other bytes", c.name)
				}
				if n := asked() - before; n != c.asked {
					t.Errorf("%s: the initiator asked for the key %d times, want %d", c.name, n, c.asked)
				}
				if err := regs[0].Deregister(key); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
