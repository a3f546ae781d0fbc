//go:build ofi

package ofi

import (
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/transport"
)

// Whatever arrives in a receive buffer, the port's decoder (handle) takes
// it without a panic: a message too short, of an unknown kind, naming a
// sender that is not in the job or a body of the wrong length is refused
// and logged; a well-formed control message from a peer is acted on. The
// seeds are one message of every kind.
func FuzzHandle(f *testing.F) {
	msg := func(h header, body []byte) []byte {
		b := make([]byte, hdrSize+len(body))
		putHeader(b, h)
		copy(b[hdrSize:], body)
		return b
	}
	f.Add([]byte{})
	f.Add(msg(header{kind: kindPacket}, []byte("payload")))
	f.Add(msg(header{kind: kindAck, arg: 3}, nil))
	f.Add(msg(header{kind: kindKeyReq, arg: 1}, nil))
	f.Add(msg(header{kind: kindKeyRep, arg: 1}, make([]byte, 32)))
	f.Add(msg(header{kind: kindAtomReq, arg: 0}, make([]byte, 34)))
	f.Add(msg(header{kind: kindAtomRep, arg: 0}, make([]byte, 8)))
	f.Add(msg(header{kind: kindAlive}, nil))
	f.Add(msg(header{kind: 200, rank: 7, ctx: 9}, make([]byte, 40)))
	f.Add(msg(header{kind: kindKeyRep, arg: 1}, make([]byte, 3)))
	ads, regs := newWorld(f, 2, Options{Provider: "tcp;ofi_rxm", Timeout: time.Minute, Logf: func(string, ...any) {}})
	f.Cleanup(func() {
		ads[0].Close()
		ads[1].Close()
	})
	if _, err := regs[1].Register(make([]byte, 64)); err != nil {
		f.Fatal(err)
	}
	pt, err := ads[1].Open(0, transport.NewDoorbell())
	if err != nil {
		f.Fatal(err)
	}
	p := pt.(*port)
	if _, err := pt.Link(transport.Addr{Rank: 0}); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > p.bufSize {
			b = b[:p.bufSize]
		}
		// Never a goodbye: it would close the link the next inputs use.
		if len(b) > 0 && b[0] == kindBye {
			b[0] = kindAlive
		}
		p.enter()
		defer p.leave()
		p.handle(&cnt{}, b)
		p.flushCtrl()
		p.readTx()
	})
}
