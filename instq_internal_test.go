package amigo

import (
	"sync"
	"testing"
)

// The overflow list is never handed to the consumer while claimed slots,
// which hold older instructions, are unread — whatever the consumer checked
// before asking for it.
func TestInstQueueOverflowWaitsForSlots(t *testing.T) {
	q := newInstQueue(4)
	post := func(v uint64) {
		in, pos := q.claim()
		if in == nil {
			q.pushOverflow(&inst{kind: instCall, op: v})
			return
		}
		in.kind, in.op = instCall, v
		q.commit(pos)
	}
	// The consumer found the slots empty and is about to take the overflow
	// list; meanwhile a producer fills the slots and overflows.
	for v := uint64(0); v < 6; v++ {
		post(v)
	}
	if list := q.takeOverflow(); list != nil {
		t.Fatalf("overflow %v handed out while 4 older instructions wait in the slots", len(list))
	}
	var got []uint64
	for in := q.peek(); in != nil; in = q.peek() {
		got = append(got, in.op)
		q.pop()
	}
	list := q.takeOverflow()
	for i := range list {
		got = append(got, list[i].op)
	}
	q.returnOverflow(list)
	for i, v := range got {
		if v != uint64(i) {
			t.Fatalf("instructions taken in order %v", got)
		}
	}
	if len(got) != 6 {
		t.Fatalf("took %d instructions, want 6", len(got))
	}
}

// Producers on several goroutines, a consumer draining as drain does: each
// producer's instructions come out in its order, through slots and
// overflow alike.
func TestInstQueueOrderUnderContention(t *testing.T) {
	const producers, each = 3, 20000
	q := newInstQueue(8)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(0); i < each; i++ {
				in, pos := q.claim()
				v := inst{kind: instCall, op: i, dest: int32(p)}
				if in == nil {
					q.pushOverflow(&v)
					continue
				}
				*in = v
				q.commit(pos)
			}
		}()
	}
	next := make([]uint64, producers)
	total := 0
	check := func(in *inst) {
		if in.op != next[in.dest] {
			t.Fatalf("producer %d: instruction %d after %d", in.dest, in.op, next[in.dest])
		}
		next[in.dest]++
		total++
	}
	for total < producers*each {
		for in := q.peek(); in != nil; in = q.peek() {
			check(in)
			q.pop()
		}
		if list := q.takeOverflow(); list != nil {
			for i := range list {
				check(&list[i])
			}
			q.returnOverflow(list)
		}
	}
	wg.Wait()
}
