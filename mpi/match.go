package mpi

import "github.com/amigo-hpc/amigo"

// The two queues of seed 002's application messaging module.
//
// The posted queue holds receives that found no message: each with its
// target match data (context id, source, tag) and its buffer. A receive
// that names a source and a tag is listed in the hash bucket of its match
// data; one with a wildcard is listed in one wildcard list. Every posted
// receive carries a sequence number in posting order, so that an arriving
// message matches the earliest posted receive that fits, wherever it is
// listed: the head of its bucket that fits and the first of the wildcard
// list that fits are compared by sequence number.
//
// The pending (unexpected) queue holds messages that found no receive: the
// origin match data, and either a copy of the inline data or the AMI's
// Deferred announcement of a large message whose data stays at the sender.
// Each entry is listed in the hash bucket of its match data and in one list
// of all entries in arrival order. A receive with a source and a tag looks
// only in its bucket; one with a wildcard walks the arrival list. Either way
// it takes the earliest message that fits: MPI's non-overtaking order,
// given that the AMI delivers the messages of one sender in order.

func hashMatch(ctx uint32, src, tag int32) uint32 {
	h := ctx*0x9e3779b1 ^ uint32(src)*0x85ebca77 ^ uint32(tag)*0xc2b2ae3d
	return h ^ h>>15
}

// fits reports whether a message (ctx, src, tag) matches receive r.
func (r *request) fits(ctx uint32, src, tag int32) bool {
	return r.ctx == ctx && (r.src == src || r.src == AnySource) && (r.tag == tag || r.tag == AnyTag && tag >= 0)
}

type reqList struct{ head, tail *request }

func (l *reqList) push(r *request) {
	r.prev, r.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = r
	} else {
		l.head = r
	}
	l.tail = r
}

func (l *reqList) remove(r *request) {
	if r.prev != nil {
		r.prev.next = r.next
	} else {
		l.head = r.next
	}
	if r.next != nil {
		r.next.prev = r.prev
	} else {
		l.tail = r.prev
	}
	r.prev, r.next = nil, nil
}

type postedQueue struct {
	buckets []reqList
	mask    uint32
	wild    reqList
	seq     uint64
	n       int
}

func (q *postedQueue) init(buckets int) {
	q.buckets = make([]reqList, buckets)
	q.mask = uint32(buckets - 1)
}

func (q *postedQueue) list(r *request) *reqList {
	if r.src == AnySource || r.tag == AnyTag {
		return &q.wild
	}
	return &q.buckets[hashMatch(r.ctx, r.src, r.tag)&q.mask]
}

func (q *postedQueue) add(r *request) {
	q.seq++
	r.seq = q.seq
	r.posted = true
	q.list(r).push(r)
	q.n++
}

func (q *postedQueue) remove(r *request) {
	q.list(r).remove(r)
	r.posted = false
	q.n--
}

// has reports whether a receive of exactly (ctx, src, tag) is posted.
func (q *postedQueue) has(ctx uint32, src, tag int32) bool {
	for r := q.buckets[hashMatch(ctx, src, tag)&q.mask].head; r != nil; r = r.next {
		if r.ctx == ctx && r.src == src && r.tag == tag {
			return true
		}
	}
	return false
}

// match removes and returns the earliest posted receive that a message
// (ctx, src, tag) fits, or nil.
func (q *postedQueue) match(ctx uint32, src, tag int32) *request {
	if q.n == 0 {
		return nil
	}
	var best *request
	b := &q.buckets[hashMatch(ctx, src, tag)&q.mask]
	from := b
	for r := b.head; r != nil; r = r.next {
		if r.ctx == ctx && r.src == src && r.tag == tag {
			best = r
			break
		}
	}
	for r := q.wild.head; r != nil; r = r.next {
		if best != nil && r.seq > best.seq {
			break
		}
		if r.fits(ctx, src, tag) {
			best, from = r, &q.wild
			break
		}
	}
	if best != nil {
		// Unlinked from the list it was found in: remove would hash
		// its match data again.
		from.remove(best)
		best.posted = false
		q.n--
	}
	return best
}

// unexpected is a message that arrived before its receive was posted.
type unexpected struct {
	ctx      uint32
	src, tag int32
	size     int
	inline   bool
	data     []byte // the inline data, in a buffer of the pool
	deferred amigo.Deferred
	// sync: the sender waits for an acknowledgement of the match (Ssend),
	// to be sent to from with ack, the header bytes 13-15 it named.
	sync bool
	from amigo.Endpoint
	ack  [3]byte
	// gen changes when the entry is released: a Message (Mprobe) names
	// it by pointer and generation.
	gen uint32

	bprev, bnext *unexpected // bucket list
	aprev, anext *unexpected // arrival list
}

type unexpList struct{ head, tail *unexpected }

type unexpQueue struct {
	buckets []unexpList
	mask    uint32
	all     unexpList
	free    []*unexpected
	n       int
}

func (q *unexpQueue) init(buckets int) {
	q.buckets = make([]unexpList, buckets)
	q.mask = uint32(buckets - 1)
}

func (q *unexpQueue) alloc() *unexpected {
	if n := len(q.free); n > 0 {
		u := q.free[n-1]
		q.free = q.free[:n-1]
		return u
	}
	return new(unexpected)
}

func (q *unexpQueue) release(u *unexpected) {
	*u = unexpected{gen: u.gen + 1}
	q.free = append(q.free, u)
}

func (q *unexpQueue) add(u *unexpected) {
	b := &q.buckets[hashMatch(u.ctx, u.src, u.tag)&q.mask]
	u.bprev, u.bnext = b.tail, nil
	if b.tail != nil {
		b.tail.bnext = u
	} else {
		b.head = u
	}
	b.tail = u
	u.aprev, u.anext = q.all.tail, nil
	if q.all.tail != nil {
		q.all.tail.anext = u
	} else {
		q.all.head = u
	}
	q.all.tail = u
	q.n++
}

func (q *unexpQueue) remove(u *unexpected) {
	b := &q.buckets[hashMatch(u.ctx, u.src, u.tag)&q.mask]
	if u.bprev != nil {
		u.bprev.bnext = u.bnext
	} else {
		b.head = u.bnext
	}
	if u.bnext != nil {
		u.bnext.bprev = u.bprev
	} else {
		b.tail = u.bprev
	}
	if u.aprev != nil {
		u.aprev.anext = u.anext
	} else {
		q.all.head = u.anext
	}
	if u.anext != nil {
		u.anext.aprev = u.aprev
	} else {
		q.all.tail = u.aprev
	}
	u.bprev, u.bnext, u.aprev, u.anext = nil, nil, nil, nil
	q.n--
}

// find returns the earliest pending message that a receive (ctx, src, tag),
// wildcards allowed, matches, or nil; it leaves it in the queue.
func (q *unexpQueue) find(ctx uint32, src, tag int32) *unexpected {
	if q.n == 0 {
		return nil
	}
	if src != AnySource && tag != AnyTag {
		for u := q.buckets[hashMatch(ctx, src, tag)&q.mask].head; u != nil; u = u.bnext {
			if u.ctx == ctx && u.src == src && u.tag == tag {
				return u
			}
		}
		return nil
	}
	for u := q.all.head; u != nil; u = u.anext {
		if u.ctx == ctx && (src == AnySource || u.src == src) && (tag == AnyTag || u.tag == tag) {
			return u
		}
	}
	return nil
}
