package mpi

import (
	"context"
	"encoding/binary"
	"slices"

	"github.com/amigo-hpc/amigo"
)

// The fault-tolerant consensus of Agree and Shrink (see ft.go): flooding
// consensus with early stopping over the AMI's failure detector.
//
// Its messages have the layer's header with kind kindAgree:
//
//	bytes 0-3   point-to-point context id of the communicator
//	bytes 4-7   the sender's rank in the communicator
//	bytes 8-11  the agreement's number on the communicator (agreeSeq)
//	byte  13    agreePropose or agreeDecided
//
// and data: the round (4 bytes, little endian, of a proposal) and the
// values, 8 bytes each.

const (
	agreePropose = 0
	agreeDecided = 1
)

type agreeKey struct {
	id    int
	epoch uint32
}

// agreement is the state of one agreement on this rank: made by the first
// of its messages to arrive or by the local call, whichever comes first.
type agreement struct {
	e       *engine
	c       *Comm // set by the local call
	nw      int   // values, 8 bytes each
	round   int
	decided bool
	value   []uint64
	// rounds[r] holds who was heard from in round r and the AND of what
	// they sent; rounds[0].from is every rank of the communicator.
	rounds []agreeRound
	// decision is a decided value received and not yet adopted, from
	// rank decFrom.
	decision []uint64
	decFrom  int
	cond     func() bool
	// posted counts the messages sent, sent those the AMI completed
	// (sentDone).
	posted, sent int
	sentDone     func(error)
}

type agreeRound struct {
	from []uint64
	val  []uint64
}

// agreementFor returns the agreement key names, making it if needed.
func (e *engine) agreementFor(key agreeKey, nw int) *agreement {
	if a := e.ft.agrees[key]; a != nil {
		return a
	}
	if e.ft.agrees == nil {
		e.ft.agrees = map[agreeKey]*agreement{}
	}
	a := &agreement{e: e, nw: nw}
	a.cond = a.ready
	a.sentDone = func(error) { a.sent++ }
	e.ft.agrees[key] = a
	return a
}

// at returns round r, making it if needed.
func (a *agreement) at(r int) *agreeRound {
	for len(a.rounds) <= r {
		v := make([]uint64, a.nw)
		for i := range v {
			v[i] = ^uint64(0)
		}
		a.rounds = append(a.rounds, agreeRound{from: make([]uint64, (a.e.size+63)/64), val: v})
	}
	return &a.rounds[r]
}

// onAgree handles a message of an agreement.
func (e *engine) onAgree(h, data []byte) {
	if e.closed || len(h) != hdrLen {
		return
	}
	cid := binary.LittleEndian.Uint32(h[0:])
	src := int(binary.LittleEndian.Uint32(h[4:]))
	epoch := binary.LittleEndian.Uint32(h[8:])
	if cid%2 != 0 || src < 0 || src >= e.size || len(data) < 4 || (len(data)-4)%8 != 0 {
		e.stats.Malformed++
		return
	}
	id := int(cid / 2)
	if c := e.commOf(cid); c != nil && epoch <= c.ft.agreeDone {
		return // an agreement decided here: nothing more to learn
	}
	nw := (len(data) - 4) / 8
	key := agreeKey{id, epoch}
	a := e.agreementFor(key, nw)
	if a.nw != nw {
		e.stats.Malformed++
		return
	}
	vals := make([]uint64, nw)
	for i := range vals {
		vals[i] = binary.LittleEndian.Uint64(data[4+8*i:])
	}
	e.events++
	if h[13] == agreeDecided {
		if !a.decided && a.decision == nil {
			a.decision, a.decFrom = vals, src
		}
		return
	}
	r := int(binary.LittleEndian.Uint32(data[0:]))
	if r < 1 || r > e.size+2 {
		e.stats.Malformed++
		return
	}
	rd := a.at(r)
	bitSet(rd.from, src)
	for i, v := range vals {
		rd.val[i] &= v
	}
}

// agree runs an agreement over the ranks of c on vals (ANDed word by
// word), with the engine locked, and returns the decided values.
func (e *engine) agree(ctx context.Context, c *Comm, vals []uint64) ([]uint64, error) {
	c.ft.agreeSeq++
	key := agreeKey{c.id, c.ft.agreeSeq}
	a := e.agreementFor(key, len(vals))
	defer func() {
		delete(e.ft.agrees, key)
		c.ft.agreeDone = key.epoch
	}()
	if a.nw != len(vals) {
		// Another rank's message of this agreement had another length:
		// a program that calls Agree and Shrink in different orders.
		return nil, errAgreeMismatch
	}
	a.c = c
	all := a.at(0)
	for i := 0; i < c.size; i++ {
		bitSet(all.from, i)
	}
	a.round = 1
	r1 := a.at(1)
	bitSet(r1.from, c.rank)
	for i, v := range vals {
		r1.val[i] &= v
	}
	a.send(agreePropose, 1, vals)
	for {
		a.step()
		if a.decided {
			return a.value, nil
		}
		if err := e.wait(ctx, a.cond); err != nil {
			return nil, e.waitErr(err, "Agree", noArg, noArg)
		}
	}
}

var errAgreeMismatch = &agreeMismatch{}

type agreeMismatch struct{}

func (*agreeMismatch) Error() string {
	return "mpi: agreement messages of another length: Agree and Shrink called in different orders"
}

// alive reports whether rank i of c is not known failed.
func (a *agreement) alive(i int) bool { return !bitGet(a.c.ft.failed, i) }

// ready is the wait condition: a decision to adopt, or the current round
// heard from every rank believed alive.
func (a *agreement) ready() bool {
	if a.decided || a.decision != nil && a.alive(a.decFrom) {
		return true
	}
	rd := a.at(a.round)
	all := a.rounds[0].from
	for w := range all {
		missing := all[w] &^ rd.from[w]
		if w < len(a.c.ft.failed) {
			missing &^= a.c.ft.failed[w]
		}
		if missing != 0 {
			return false
		}
	}
	return true
}

// step moves the agreement on as far as it can without waiting.
func (a *agreement) step() {
	for !a.decided {
		if a.decision != nil {
			if a.alive(a.decFrom) {
				a.decide(a.decision)
				return
			}
			a.decision = nil // from a rank since failed: the rounds go on
		}
		if !a.ready() {
			return
		}
		cur, prev := a.at(a.round), a.at(a.round-1)
		if slices.Equal(cur.from, prev.from) {
			a.decide(cur.val)
			return
		}
		a.round++
		next := a.at(a.round)
		bitSet(next.from, a.c.rank)
		for i, v := range cur.val {
			next.val[i] &= v
		}
		a.send(agreePropose, a.round, cur.val)
	}
}

func (a *agreement) decide(v []uint64) {
	a.decided, a.value = true, slices.Clone(v)
	a.send(agreeDecided, 0, a.value)
}

// send sends a message of the agreement to every other rank of c believed
// alive. Sends to a rank that fails on the way fail, which is expected.
func (a *agreement) send(kind byte, round int, vals []uint64) {
	e, c := a.e, a.c
	for i, ep := range c.eps {
		if i == c.rank || !a.alive(i) {
			continue
		}
		if testAgreeSend != nil {
			testAgreeSend(a, kind, round, i)
		}
		hdr := make([]byte, hdrLen)
		putHdr((*[hdrLen]byte)(hdr), c.p2p, int32(c.rank), int32(c.ft.agreeSeq))
		hdr[12], hdr[13] = kindAgree, kind
		data := make([]byte, 4+8*len(vals))
		binary.LittleEndian.PutUint32(data, uint32(round))
		for j, v := range vals {
			binary.LittleEndian.PutUint64(data[4+8*j:], v)
		}
		if e.held.Send(ep, e.disp, hdr, data, a.sentDone) == nil {
			a.posted++
		}
	}
	e.unflushed = true
}

// testAgreeSend, if set, is called before each message of an agreement is
// sent: the tests kill a rank part way through a round with it.
var testAgreeSend func(a *agreement, kind byte, round, to int)

// agreeMsg takes an agreement message out of m: inline, or fetched.
func (e *engine) agreeMsg(m *amigo.Message) {
	if m.Inline() {
		e.onAgree(m.Header, m.Data)
		return
	}
	h := append([]byte(nil), m.Header...)
	buf := make([]byte, m.Size())
	_ = m.Receive(buf, func(err error) {
		if err == nil {
			e.onAgree(h, buf)
		}
	})
}
