// Package transporttest is the conformance suite every amigo adapter runs:
// ordering, full FIFOs, transfer counters, RDMA bounds, doorbells and close.
// It drives adapters through the transport contract exactly as the AMI does,
// with the completion tracker of package internal/fifo on the producer side.
package transporttest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/internal/fifo"
	"github.com/amigo-hpc/amigo/internal/ring"
	"github.com/amigo-hpc/amigo/transport"
)

// World is a job of adapters, one per rank, all in the test process.
type World struct {
	Adapters []transport.Adapter
	Regions  []*transport.Regions
	// Close releases what the world holds beyond the adapters (segments,
	// sockets); may be nil.
	Close func()
	// Alloc, if not nil, returns n bytes of rank's memory for the suite to
	// register, in place of Go memory: an adapter that moves GET and PUT
	// only on memory it allocated itself is tested that way.
	Alloc func(rank, n int) []byte
}

// mem returns n zeroed bytes of rank's memory for registration.
func (w *World) mem(t *testing.T, rank, n int) []byte {
	t.Helper()
	if w.Alloc == nil {
		return make([]byte, n)
	}
	b := w.Alloc(rank, n)
	if len(b) < n {
		t.Fatalf("Alloc(%d, %d) returned %d bytes", rank, n, len(b))
	}
	b = b[:n:n]
	clear(b)
	return b
}

// Factory makes a world of n ranks.
type Factory func(t *testing.T, n int) *World

// timeout bounds every wait of the suite.
const timeout = 60 * time.Second

// Run runs the suite against the adapters f makes.
func Run(t *testing.T, f Factory) {
	t.Run("Ordering", func(t *testing.T) { testOrdering(t, f) })
	t.Run("FullFIFO", func(t *testing.T) { testFullFIFO(t, f) })
	t.Run("Counters", func(t *testing.T) { testCounters(t, f) })
	t.Run("RDMABounds", func(t *testing.T) { testRDMABounds(t, f) })
	t.Run("LargeRDMA", func(t *testing.T) { testLargeRDMA(t, f) })
	t.Run("Doorbell", func(t *testing.T) { testDoorbell(t, f) })
	t.Run("Close", func(t *testing.T) { testClose(t, f) })
}

func world(t *testing.T, f Factory, n int) *World {
	t.Helper()
	w := f(t, n)
	if len(w.Adapters) != n || len(w.Regions) != n {
		t.Fatalf("factory made %d adapters and %d region tables for %d ranks", len(w.Adapters), len(w.Regions), n)
	}
	t.Cleanup(func() {
		for _, a := range w.Adapters {
			_ = a.Close()
		}
		if w.Close != nil {
			w.Close()
		}
	})
	return w
}

// sender is the producer side of a link, as the AMI keeps it.
type sender struct {
	l    *transport.Link
	msg  *fifo.Tracker
	rdma *fifo.Tracker
}

func newSender(l *transport.Link) *sender {
	return &sender{
		l:    l,
		msg:  fifo.New(l.Msg.Slots(), l.Msg.HeadCounter(), l.Msg.TransferCounter(), nil),
		rdma: fifo.New(l.RDMA.Slots(), l.RDMA.HeadCounter(), l.RDMA.TransferCounter(), l.RDMA.Status),
	}
}

// send writes payload as one descriptor, listing cb, and reports whether
// the FIFO had room.
func (s *sender) send(payload []byte, cb fifo.Done) bool {
	k := ring.SlotsFor(len(payload))
	tail := s.msg.Tail()
	pad := s.l.Msg.PadFor(tail, k)
	if !s.msg.Space(pad + k) {
		return false
	}
	if pad > 0 {
		s.l.Msg.WritePad(tail, pad)
		s.msg.Inject(pad, nil)
		tail += uint64(pad)
	}
	copy(s.l.Msg.Payload(tail, len(payload)), payload)
	s.l.Msg.Seal(tail, len(payload))
	s.msg.Inject(k, cb)
	s.l.Msg.Publish(s.msg.Tail())
	if s.l.MsgBell != nil {
		s.l.MsgBell.Ring()
	}
	return true
}

// rdmaOp injects one RDMA descriptor and reports whether there was room.
func (s *sender) rdmaOp(kind transport.RDMAKind, local []byte, key transport.Key, off uint64, cb fifo.Done) bool {
	if !s.rdma.Space(1) {
		return false
	}
	d := s.l.RDMA.Slot(s.rdma.Tail())
	d.Kind, d.Local, d.Key, d.Off, d.Remote = kind, local, key, off, false
	s.rdma.Inject(1, cb)
	s.l.RDMA.Publish(s.rdma.Tail())
	if s.l.RDMA.Bell != nil {
		s.l.RDMA.Bell.Ring()
	}
	return true
}

// collector records packets a port delivers.
type collector struct {
	mu   sync.Mutex
	pkts map[transport.Addr][][]byte
}

func (c *collector) Receive(from transport.Addr, pkt []byte) {
	c.mu.Lock()
	if c.pkts == nil {
		c.pkts = make(map[transport.Addr][][]byte)
	}
	c.pkts[from] = append(c.pkts[from], append([]byte(nil), pkt...))
	c.mu.Unlock()
}

func (c *collector) count(from transport.Addr) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pkts[from])
}

// until progresses ports until cond holds or the suite's timeout passes.
func until(t *testing.T, what string, cond func() bool, step func()) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		step()
	}
}

// open opens context ctx's port with the doorbell the AMI would give it: the
// adapter's own if it provides one (its peers in other processes can ring
// only that one), else an in-process doorbell.
func open(t *testing.T, a transport.Adapter, ctx int) (transport.Port, *transport.Doorbell) {
	t.Helper()
	bell := transport.NewDoorbell()
	if dp, ok := a.(transport.DoorbellProvider); ok {
		b, err := dp.Doorbell(ctx)
		if err != nil {
			t.Fatalf("doorbell of context %d: %v", ctx, err)
		}
		if b != nil {
			bell = b
		}
	}
	p, err := a.Open(ctx, bell)
	if err != nil {
		t.Fatalf("open context %d: %v", ctx, err)
	}
	return p, bell
}

func addr(rank, ctx int) transport.Addr {
	return transport.Addr{Rank: int32(rank), Context: int32(ctx)}
}

func packet(src, seq, size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(src*31 + seq*7 + i)
	}
	if size >= 8 {
		binary.LittleEndian.PutUint32(b, uint32(src))
		binary.LittleEndian.PutUint32(b[4:], uint32(seq))
	}
	return b
}

// Several producers send to one port at once; each link delivers its packets
// intact and in order.
func testOrdering(t *testing.T, f Factory) {
	const n, msgs = 4, 3000
	w := world(t, f, n)
	dst, _ := open(t, w.Adapters[0], 0)
	srcs := make([]transport.Port, n)
	for r := 1; r < n; r++ {
		srcs[r], _ = open(t, w.Adapters[r], 0)
	}
	maxPayload := 0
	var wg sync.WaitGroup
	errc := make(chan error, n)
	for r := 1; r < n; r++ {
		l, err := srcs[r].Link(addr(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		if maxPayload == 0 {
			maxPayload = ring.MaxPayload(l.Msg.Slots())
		}
		s := newSender(l)
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			deadline := time.Now().Add(timeout)
			for seq := 0; seq < msgs; {
				size := 8 + (seq*37)%min(maxPayload-8, 3000)
				if s.send(packet(r, seq, size), nil) {
					seq++
					continue
				}
				srcs[r].Progress()
				if time.Now().After(deadline) {
					errc <- fmt.Errorf("rank %d: no room for message %d", r, seq)
					return
				}
			}
		}(r)
	}
	var col collector
	total := func() int {
		s := 0
		for r := 1; r < n; r++ {
			s += col.count(addr(r, 0))
		}
		return s
	}
	until(t, "all packets", func() bool { return total() == (n-1)*msgs }, func() {
		dst.Poll(&col, 64)
		select {
		case err := <-errc:
			t.Fatal(err)
		default:
		}
	})
	wg.Wait()
	for r := 1; r < n; r++ {
		for seq, p := range col.pkts[addr(r, 0)] {
			size := 8 + (seq*37)%min(maxPayload-8, 3000)
			if !bytes.Equal(p, packet(r, seq, size)) {
				t.Fatalf("from rank %d: packet %d of %d bytes differs (got %d bytes, seq %d)", r, seq, size, len(p), binary.LittleEndian.Uint32(p[4:]))
			}
		}
	}
}

// A FIFO whose consumer does not poll fills up; the producer is told so,
// loses nothing, and goes on once the consumer polled.
func testFullFIFO(t *testing.T, f Factory) {
	w := world(t, f, 2)
	dst, _ := open(t, w.Adapters[1], 0)
	src, _ := open(t, w.Adapters[0], 0)
	l, err := src.Link(addr(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	s := newSender(l)
	// Fill the FIFO. An adapter whose engine drains the FIFO into a
	// socket or a peer's buffer makes room for a while; it must run out.
	sent := 0
	deadline := time.Now().Add(timeout)
	for idle := 0; idle < 2000; {
		if s.send(packet(0, sent, 200), nil) {
			sent++
			idle = 0
			continue
		}
		idle++
		src.Progress()
		time.Sleep(10 * time.Microsecond)
		if time.Now().After(deadline) {
			t.Fatal("timed out filling the FIFO")
		}
	}
	if sent < l.Msg.Slots()/ring.SlotsFor(200) {
		t.Fatalf("FIFO of %d slots took only %d packets of 4 slots", l.Msg.Slots(), sent)
	}
	var col collector
	until(t, "the first packets", func() bool { return col.count(addr(0, 0)) > 0 }, func() { dst.Poll(&col, 1) })
	// Room again, and nothing lost.
	until(t, "room after polling", func() bool { return s.send(packet(0, sent, 200), nil) }, func() {
		dst.Poll(&col, 1)
		src.Progress()
	})
	sent++
	until(t, "every packet", func() bool { return col.count(addr(0, 0)) == sent }, func() {
		dst.Poll(&col, 16)
		src.Progress()
	})
	for i, p := range col.pkts[addr(0, 0)] {
		if !bytes.Equal(p, packet(0, i, 200)) {
			t.Fatalf("packet %d differs", i)
		}
	}
	// Poll respects its budget.
	for i := 0; i < 10; i++ {
		for !s.send(packet(0, i, 10), nil) {
			dst.Poll(&col, 16)
		}
	}
	col = collector{}
	until(t, "a packet", func() bool { return col.count(addr(0, 0)) > 0 }, func() {
		if got := dst.Poll(&col, 3); got > 3 {
			t.Fatalf("Poll with budget 3 delivered %d", got)
		}
	})
}

// The transfer counters count every descriptor once it is done with, and
// the completion tracker calls every callback once, in order, only then.
func testCounters(t *testing.T, f Factory) {
	w := world(t, f, 2)
	dst, _ := open(t, w.Adapters[1], 0)
	src, _ := open(t, w.Adapters[0], 0)
	l, err := src.Link(addr(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	s := newSender(l)
	const msgs = 500
	var order []int
	var col collector
	for i := 0; i < msgs; i++ {
		i := i
		until(t, "room", func() bool {
			return s.send(packet(0, i, 8+i%500), fifo.Func(func(err error) {
				if err != nil {
					t.Errorf("callback %d: %v", i, err)
				}
				order = append(order, i)
			}))
		}, func() {
			dst.Poll(&col, 8)
			src.Progress()
			s.msg.Complete()
		})
		if len(order) > col.count(addr(0, 0)) {
			t.Fatalf("%d callbacks ran but only %d packets were delivered", len(order), col.count(addr(0, 0)))
		}
	}
	until(t, "every callback", func() bool { return len(order) == msgs }, func() {
		dst.Poll(&col, 64)
		src.Progress()
		s.msg.Complete()
	})
	for i, v := range order {
		if v != i {
			t.Fatalf("callback %d ran in position %d", v, i)
		}
	}
	if s.msg.Pending() != 0 || s.msg.Outstanding() != 0 {
		t.Fatalf("pending %d, outstanding %d after all completed", s.msg.Pending(), s.msg.Outstanding())
	}
	// RDMA: the counter moves once per descriptor.
	mem := w.mem(t, 1, 4096)
	key, err := w.Regions[1].Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	before := l.RDMA.TransferCounter().Load()
	done := 0
	for i := 0; i < 100; i++ {
		buf := []byte{byte(i)}
		until(t, "RDMA room", func() bool {
			return s.rdmaOp(transport.Put, buf, key, uint64(i), fifo.Func(func(err error) {
				if err != nil {
					t.Errorf("put %d: %v", i, err)
				}
				done++
			}))
		}, func() { src.Progress(); s.rdma.Complete(); dst.Poll(&col, 8) })
	}
	until(t, "RDMA callbacks", func() bool { return done == 100 }, func() { src.Progress(); s.rdma.Complete(); dst.Poll(&col, 8) })
	if got := l.RDMA.TransferCounter().Load() - before; got != 100 {
		t.Fatalf("RDMA transfer counter moved by %d for 100 descriptors", got)
	}
	// A Put without Remote completes once its local buffer is free: over a
	// network the bytes may still be on their way.
	landed := func() bool {
		for i := 0; i < 100; i++ {
			if mem[i] != byte(i) {
				return false
			}
		}
		return true
	}
	until(t, "the puts to land", landed, func() { src.Progress(); dst.Poll(&col, 8) })
}

// GET and PUT inside a region move the bytes; outside it, with a bad key, or
// on a deregistered region they fail with a clear error and touch nothing.
func testRDMABounds(t *testing.T, f Factory) {
	w := world(t, f, 2)
	dst, _ := open(t, w.Adapters[1], 0)
	src, _ := open(t, w.Adapters[0], 0)
	l, err := src.Link(addr(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	s := newSender(l)
	// The region is the middle of a larger buffer; the guards around it
	// must never change.
	backing := w.mem(t, 1, 3000)
	for i := range backing {
		backing[i] = 0xEE
	}
	region := backing[1000:2000]
	for i := range region {
		region[i] = byte(i)
	}
	key, err := w.Regions[1].Register(region)
	if err != nil {
		t.Fatal(err)
	}
	gone, err := w.Regions[1].Register(w.mem(t, 1, 100))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Regions[1].Deregister(gone); err != nil {
		t.Fatal(err)
	}
	type op struct {
		name string
		kind transport.RDMAKind
		buf  []byte
		key  transport.Key
		off  uint64
		want error
	}
	ops := []op{
		{"get inside", transport.Get, make([]byte, 100), key, 100, nil},
		{"get to the end", transport.Get, make([]byte, 100), key, 900, nil},
		{"put inside", transport.Put, bytes.Repeat([]byte{0xAB}, 50), key, 500, nil},
		{"get past the end", transport.Get, make([]byte, 100), key, 901, transport.ErrBounds},
		{"get far out", transport.Get, make([]byte, 10), key, 1 << 40, transport.ErrBounds},
		{"get at offset overflowing", transport.Get, make([]byte, 10), key, ^uint64(0) - 4, transport.ErrBounds},
		{"put past the end", transport.Put, bytes.Repeat([]byte{0xCD}, 100), key, 950, transport.ErrBounds},
		{"put larger than the region", transport.Put, bytes.Repeat([]byte{0xCD}, 1001), key, 0, transport.ErrBounds},
		{"get with a forged key", transport.Get, make([]byte, 10), key ^ (1 << 30), 0, transport.ErrBadKey},
		{"put with key zero", transport.Put, []byte{1}, 0, 0, transport.ErrBadKey},
		{"get from a deregistered region", transport.Get, make([]byte, 10), gone, 0, transport.ErrBadKey},
		{"put to a deregistered region", transport.Put, []byte{1}, gone, 0, transport.ErrBadKey},
	}
	results := make([]error, len(ops))
	doneN := 0
	var col collector
	for i := range ops {
		i := i
		o := ops[i]
		until(t, "RDMA room", func() bool {
			return s.rdmaOp(o.kind, o.buf, o.key, o.off, fifo.Func(func(err error) { results[i] = err; doneN++ }))
		}, func() { src.Progress(); s.rdma.Complete(); dst.Poll(&col, 8) })
	}
	until(t, "RDMA completions", func() bool { return doneN == len(ops) }, func() { src.Progress(); s.rdma.Complete(); dst.Poll(&col, 8) })
	for i, o := range ops {
		err := results[i]
		if o.want == nil {
			if err != nil {
				t.Errorf("%s: %v", o.name, err)
			}
			continue
		}
		if !errors.Is(err, o.want) {
			t.Errorf("%s: got %v, want %v", o.name, err, o.want)
			continue
		}
		var pe *transport.PeerError
		if !errors.As(err, &pe) || pe.Addr.Rank != 1 {
			t.Errorf("%s: %v does not name rank 1", o.name, err)
		}
	}
	for i, b := range ops[0].buf {
		if b != byte(100+i) {
			t.Fatalf("get inside: byte %d is %d", i, b)
		}
	}
	for i, b := range ops[1].buf {
		if b != byte(900+i) {
			t.Fatalf("get to the end: byte %d is %d", i, b)
		}
	}
	for i := range region {
		want := byte(i)
		if i >= 500 && i < 550 {
			want = 0xAB
		}
		if region[i] != want {
			t.Fatalf("region byte %d is %#x, want %#x", i, region[i], want)
		}
	}
	for i := 0; i < 1000; i++ {
		if backing[i] != 0xEE || backing[2000+i] != 0xEE {
			t.Fatal("an access touched memory outside the region")
		}
	}
}

// GETs and PUTs of many sizes, up to several MiB, from and to every part of
// a region, move the right bytes, whichever way the adapter moves them; a
// piece at a time or all at once, each completes once.
func testLargeRDMA(t *testing.T, f Factory) {
	w := world(t, f, 2)
	dst, _ := open(t, w.Adapters[1], 0)
	src, _ := open(t, w.Adapters[0], 0)
	l, err := src.Link(addr(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	s := newSender(l)
	const regionLen = 5<<20 + 123
	region := w.mem(t, 1, regionLen)
	for i := range region {
		region[i] = byte(i*7 + i>>12)
	}
	key, err := w.Regions[1].Register(region)
	if err != nil {
		t.Fatal(err)
	}
	local := w.mem(t, 0, regionLen)
	var col collector
	step := func() { src.Progress(); s.rdma.Complete(); dst.Poll(&col, 8); dst.Progress() }
	type xfer struct {
		kind      transport.RDMAKind
		off, n    int
		loff      int
		err       error
		completed int
	}
	var xs []*xfer
	sizes := []int{1, 63, 4096, 4097, 65536, 65536 + 17, 1<<20 - 1, 1 << 20, 3<<20 + 5, 5 << 20}
	for i, n := range sizes {
		off := (i * 4099) % (regionLen - n + 1)
		xs = append(xs, &xfer{kind: transport.Get, off: off, n: n, loff: 0})
	}
	// Gets first, each into the start of local, waiting for each, then
	// Puts of a pattern back into the region.
	for _, x := range xs {
		clear(local[:x.n])
		until(t, "RDMA room", func() bool {
			return s.rdmaOp(x.kind, local[x.loff:x.loff+x.n], key, uint64(x.off), fifo.Func(func(err error) { x.err = err; x.completed++ }))
		}, step)
		until(t, fmt.Sprintf("get of %d bytes", x.n), func() bool { return x.completed > 0 }, step)
		if x.err != nil || x.completed != 1 {
			t.Fatalf("get of %d at %d: %v (completed %d times)", x.n, x.off, x.err, x.completed)
		}
		if !bytes.Equal(local[:x.n], region[x.off:x.off+x.n]) {
			t.Fatalf("get of %d bytes at %d moved the wrong bytes", x.n, x.off)
		}
	}
	want := make([]byte, regionLen)
	copy(want, region)
	for i, n := range sizes {
		off := (i * 8191) % (regionLen - n + 1)
		buf := local[regionLen-n:]
		for j := range buf {
			buf[j] = byte(j*13 + i)
		}
		copy(want[off:], buf)
		x := &xfer{}
		until(t, "RDMA room", func() bool {
			return s.rdmaOp(transport.Put, buf, key, uint64(off), fifo.Func(func(err error) { x.err = err; x.completed++ }))
		}, step)
		until(t, fmt.Sprintf("put of %d bytes", n), func() bool { return x.completed > 0 }, step)
		if x.err != nil || x.completed != 1 {
			t.Fatalf("put of %d at %d: %v", n, off, x.err)
		}
		// A Put without Remote completes once its local buffer may be
		// reused; its data reaches the region as the target's side of the
		// fabric takes it, which may take more of the target's progress.
		until(t, fmt.Sprintf("put of %d bytes at %d to reach the region", n, off), func() bool { return bytes.Equal(region, want) }, step)
	}
	// Several in flight at once, into distinct parts of local.
	clear(local)
	doneN := 0
	var firstErr error
	pos := 0
	type piece struct{ loff, off, n int }
	var ps []piece
	for i := 0; i < 8; i++ {
		n := 300_000 + i*1001
		ps = append(ps, piece{pos, (i * 500_009) % (regionLen - n), n})
		pos += n
	}
	for _, p := range ps {
		until(t, "RDMA room", func() bool {
			return s.rdmaOp(transport.Get, local[p.loff:p.loff+p.n], key, uint64(p.off), fifo.Func(func(err error) {
				if err != nil && firstErr == nil {
					firstErr = err
				}
				doneN++
			}))
		}, step)
	}
	until(t, "concurrent gets", func() bool { return doneN == len(ps) }, step)
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	for _, p := range ps {
		if !bytes.Equal(local[p.loff:p.loff+p.n], region[p.off:p.off+p.n]) {
			t.Fatalf("concurrent get of %d bytes at %d moved the wrong bytes", p.n, p.off)
		}
	}
}

// A consumer asleep on its doorbell wakes when a producer sends.
func testDoorbell(t *testing.T, f Factory) {
	w := world(t, f, 2)
	dst, bell := open(t, w.Adapters[1], 0)
	src, _ := open(t, w.Adapters[0], 0)
	l, err := src.Link(addr(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	s := newSender(l)
	var col collector
	woke := make(chan struct{})
	go func() {
		defer close(woke)
		timer := time.NewTimer(time.Hour)
		timer.Stop()
		deadline := time.Now().Add(timeout)
		for col.count(addr(0, 0)) == 0 && time.Now().Before(deadline) {
			bell.Arm()
			if dst.Poll(&col, 1) > 0 {
				bell.Disarm()
				break
			}
			bell.Sleep(nil, timer, 50*time.Millisecond)
		}
	}()
	time.Sleep(20 * time.Millisecond) // let the consumer fall asleep
	until(t, "room", func() bool { return s.send(packet(0, 0, 8), nil) }, func() { src.Progress() })
	for i := 0; i < 100; i++ {
		src.Progress()
	}
	select {
	case <-woke:
	case <-time.After(timeout):
		t.Fatal("consumer never woke")
	}
	if col.count(addr(0, 0)) != 1 {
		t.Fatal("consumer woke without the packet")
	}
}

// Closing a port fails the links into it with an error naming it, and
// completes the callbacks waiting on them; other links keep working.
func testClose(t *testing.T, f Factory) {
	w := world(t, f, 3)
	victim, _ := open(t, w.Adapters[1], 0)
	other, _ := open(t, w.Adapters[2], 0)
	src, _ := open(t, w.Adapters[0], 0)
	l1, err := src.Link(addr(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	l2, err := src.Link(addr(2, 0))
	if err != nil {
		t.Fatal(err)
	}
	s1, s2 := newSender(l1), newSender(l2)
	calls, failed := 0, 0
	for i := 0; i < 5; i++ {
		if !s1.send(packet(0, i, 8), fifo.Func(func(err error) {
			calls++
			if err != nil {
				failed++
			}
		})) {
			t.Fatal("no room in a fresh FIFO")
		}
	}
	if err := victim.Close(); err != nil {
		t.Fatal(err)
	}
	until(t, "the link to fail", func() bool { return l1.Err() != nil }, func() { src.Progress() })
	var pe *transport.PeerError
	if err := l1.Err(); !errors.As(err, &pe) || pe.Addr.Rank != 1 {
		t.Fatalf("link error %v does not name rank 1", err)
	}
	// The AMI completes what the failed link held: every callback runs
	// exactly once, those of packets the victim never took with the error.
	s1.msg.Complete()
	s1.msg.Fail(l1.Err())
	if calls != 5 || failed == 0 {
		t.Fatalf("%d callbacks ran (%d with an error), want 5 with at least one error", calls, failed)
	}
	// A link to the closed port does not work.
	if l, err := src.Link(addr(1, 0)); err == nil && l.Err() == nil {
		t.Fatal("link to a closed port works")
	}
	// The other link is unaffected.
	var col collector
	for i := 0; i < 50; i++ {
		until(t, "room", func() bool { return s2.send(packet(0, i, 100), nil) }, func() { other.Poll(&col, 8); src.Progress() })
	}
	until(t, "packets on the healthy link", func() bool { return col.count(addr(0, 0)) == 50 }, func() { other.Poll(&col, 8); src.Progress() })
	if l2.Err() != nil {
		t.Fatalf("healthy link failed: %v", l2.Err())
	}
}
