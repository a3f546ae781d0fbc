package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/mpi"
)

// Environment of a rank, set by the driver.
const (
	envScenario = "SOAK_SCENARIO" // scenario name
	envSeed     = "SOAK_SEED"     // the round's seed, the same on every rank
	envEnd      = "SOAK_END"      // unix milliseconds at which traffic stops
	envVictim   = "SOAK_VICTIM"   // rank the fault is aimed at
	envTimeout  = "SOAK_TIMEOUT"  // AMIGO_TCP_TIMEOUT's value, as a duration
)

// Dispatch ids of the soak's traffic.
const (
	dMsg    amigo.Dispatch = 10 // Send: inline, eager or large
	dPut    amigo.Dispatch = 11 // PutNotify's notification
	dPutAck amigo.Dispatch = 12 // the target checked a Put: the slot is free
	dMcast  amigo.Dispatch = 13 // Multicast
	dBye    amigo.Dispatch = 14 // no more traffic from this rank
)

// Kinds of operation, as counted.
const (
	kInline = iota
	kEager
	kLarge
	kGet
	kPut
	kMcast
	kColl
	nKinds
)

var kindNames = [nKinds]string{"inline", "eager", "large", "get", "put", "mcast", "coll"}

const (
	poolSize     = 4 << 20 // random bytes messages are cut from
	getRegion    = 2 << 20 // each rank's region for GET, filled from its seed
	putSlot      = 1 << 20 // each rank's slot in a peer's PUT region
	hdrLen       = 32
	maxInFlight  = 48       // operations a rank keeps in flight
	maxBytesOut  = 24 << 20 // bytes a rank keeps in flight
	budgetHold   = 3 * time.Second
	unexpBudget  = 1 << 20 // AMIGO_UNEXPECTED_BUDGET of the budget scenario
	collRounds   = 6
	killFallback = 5 * time.Second // after arming, the driver kills a victim that did not
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// KindStats counts the operations of one kind a rank issued.
type KindStats struct {
	Issued, OK, Failed, Bytes uint64
}

// Result is what a rank reports, as one JSON line on standard output.
type Result struct {
	Rank  int
	Kinds [nKinds]KindStats
	// Delivered counts messages (Send, PutNotify, Multicast) a rank received
	// whole with a good checksum, by source; SentOK those whose sender saw
	// them complete without error, by destination.
	Delivered, SentOK   []uint64
	DeliveredBytes      uint64
	ChecksumFailures    uint64
	Duplicates          uint64
	OutOfOrder          uint64
	ReceiveFailures     uint64
	Hangs               uint64   // operations that neither completed nor failed
	HangKinds           []string // their kinds
	Mcasts              []string // the rank's last multicasts as origin and how each ended
	ErrNamed            []uint64 // errors reported, by the rank they named
	ErrUnnamed          uint64   // errors that named no rank
	ErrSamples          []string
	ByeMissing          []int // live-looking peers whose goodbye never came
	ByeAckErrors        int   // goodbyes whose remote completion the peer's orderly close failed
	UnexpectedPeak      int
	Held                int // messages the budget scenario's slow receiver held
	PeerFailures        uint64
	GoroutinesBefore    int
	GoroutinesAfter     int
	FDsBefore, FDsAfter int
	FDsLeft             []string `json:",omitempty"` // descriptors open after Close that were not before Open
	HeapBefore          uint64
	HeapAfter           uint64
	RSSBefore, RSSAfter uint64
	Killed              string `json:",omitempty"` // phase the rank killed itself in
	CollectivesTime     time.Duration
}

type header struct {
	kind uint8
	src  uint16
	n    uint32
	seq  uint64
	crc  uint32
	off  uint64
}

func (h header) put(b []byte) []byte {
	b = b[:hdrLen]
	clear(b)
	b[0] = h.kind
	binary.LittleEndian.PutUint16(b[2:], h.src)
	binary.LittleEndian.PutUint32(b[4:], h.n)
	binary.LittleEndian.PutUint64(b[8:], h.seq)
	binary.LittleEndian.PutUint32(b[16:], h.crc)
	binary.LittleEndian.PutUint64(b[24:], h.off)
	return b
}

func parseHeader(b []byte) (header, bool) {
	if len(b) != hdrLen {
		return header{}, false
	}
	return header{
		kind: b[0],
		src:  binary.LittleEndian.Uint16(b[2:]),
		n:    binary.LittleEndian.Uint32(b[4:]),
		seq:  binary.LittleEndian.Uint64(b[8:]),
		crc:  binary.LittleEndian.Uint32(b[16:]),
		off:  binary.LittleEndian.Uint64(b[24:]),
	}, true
}

// fillSeeded fills b with bytes of the generator seeded by (seed, stream).
func fillSeeded(b []byte, seed uint64, stream uint64) {
	r := rand.New(rand.NewPCG(seed, stream))
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
}

// checkErr is wrong data a check found, not an error amigo reported.
type checkErr string

func (e checkErr) Error() string { return string(e) }

type deferred struct {
	d amigo.Deferred
	h header
}

// rank is the state of one rank of the soak; everything but the signal
// flags is touched only by the goroutine that owns context 0.
type rank struct {
	cl       *amigo.Client
	c        *amigo.Context
	me, n    int
	scenario string
	victim   int
	seed     uint64
	rng      *rand.Rand
	pool     []byte
	gets     [][]byte // every rank's GET region, as expected
	getReg   *amigo.GlobalRegion
	putReg   *amigo.GlobalRegion
	putMem   []byte
	res      Result

	seq         uint64
	inFlight    int
	bytesOut    int
	failed      []bool
	putBusy     []bool
	mcastBusy   bool
	seen        []map[uint64]struct{}
	lastSeq     []uint64
	byeFrom     []bool
	byeAcked    []bool
	holding     bool
	held        []deferred
	armed       atomic.Bool
	armedAt     time.Time
	killMark    amigo.Stats
	killPending bool
	mix         []int  // SOAK_MIX: only these kinds, for diagnosis
	events      uint64 // completions and arrivals, for the traffic loop
	drainBound  time.Duration
	recvOpen    [nKinds]int // receives of announced data under way, by kind
	// openRecv holds the headers of those receives, so that one that
	// hangs is named (its sender and sequence number).
	openRecv []header
	// mcasts remembers this rank's last multicasts as origin, printed
	// with the round's output when one of its receives or multicasts
	// hangs or fails (lastMcasts).
	mcasts [4]string
}

func envInt(name string) int {
	v, _ := strconv.Atoi(os.Getenv(name))
	return v
}

// runRank is the program of one rank; it prints its Result and returns.
func runRank() error {
	r := &rank{scenario: os.Getenv(envScenario), victim: envInt(envVictim)}
	r.seed, _ = strconv.ParseUint(os.Getenv(envSeed), 10, 64)
	end := time.UnixMilli(int64(envInt(envEnd)))
	tcpTimeout, err := time.ParseDuration(os.Getenv(envTimeout))
	if err != nil {
		return fmt.Errorf("soak rank: %s: %w", envTimeout, err)
	}
	r.drainBound = 3*tcpTimeout + 8*time.Second
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	var armedFlag atomic.Bool
	go func() {
		<-usr1
		armedFlag.Store(true)
	}()

	warmNetpoll()
	runtime.GC()
	r.res.GoroutinesBefore, r.res.FDsBefore = runtime.NumGoroutine(), countFDs()
	fds0 := fdTargets()
	r.res.HeapBefore, r.res.RSSBefore = heapInUse(), rss()

	setup, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := amigo.Open(setup, amigo.Config{Contexts: 2, OnError: func(error) {}})
	if err != nil {
		return err
	}
	r.cl, r.c, r.me, r.n = cl, cl.Context(0), cl.Rank(), cl.Size()
	r.res.Rank = r.me
	r.rng = rand.New(rand.NewPCG(r.seed, uint64(r.me)+1))
	r.pool = make([]byte, poolSize)
	fillSeeded(r.pool, r.seed, 1000+uint64(r.me))
	r.gets = make([][]byte, r.n)
	for p := range r.gets {
		r.gets[p] = make([]byte, getRegion)
		fillSeeded(r.gets[p], r.seed, 2000+uint64(p))
	}
	r.res.Delivered, r.res.SentOK, r.res.ErrNamed = make([]uint64, r.n), make([]uint64, r.n), make([]uint64, r.n)
	r.failed, r.putBusy = make([]bool, r.n), make([]bool, r.n)
	r.seen, r.lastSeq = make([]map[uint64]struct{}, r.n), make([]uint64, r.n)
	for p := range r.seen {
		r.seen[p] = map[uint64]struct{}{}
	}
	r.byeFrom, r.byeAcked = make([]bool, r.n), make([]bool, r.n)
	for _, k := range strings.Split(os.Getenv("SOAK_MIX"), ",") {
		// The draw that selects kind k in issue.
		if i := slices.Index(kindNames[:], k); i >= 0 {
			r.mix = append(r.mix, []int{0, 40, 60, 72, 82, 92}[i])
		}
	}
	for d, h := range map[amigo.Dispatch]amigo.Handler{dMsg: r.onMsg, dPut: r.onPut, dPutAck: r.onPutAck, dMcast: r.onMcast, dBye: r.onBye} {
		if err := r.c.SetDispatch(d, h); err != nil {
			return err
		}
	}
	if r.getReg, err = cl.RegisterAll(setup, r.gets[r.me]); err != nil {
		return err
	}
	r.putMem = make([]byte, r.n*putSlot)
	if r.putReg, err = cl.RegisterAll(setup, r.putMem); err != nil {
		return err
	}

	// Collectives on context 1, on a goroutine of their own, while context
	// 0 carries the rest; then a barrier, after which faults may come.
	collDone := make(chan struct{})
	var coll [2]KindStats // issued/ok/failed in [0], checksum failures in [1].Failed
	var collErrs []error
	collStart := time.Now()
	var collTime time.Duration
	go func() {
		defer close(collDone)
		coll, collErrs = r.collectives(end)
		collTime = time.Since(collStart)
	}()

	traffic, stopTraffic := context.WithDeadline(context.Background(), end)
	defer stopTraffic()
	printedArmed := false
	for {
		select {
		case <-collDone:
			if !printedArmed {
				printedArmed = true
				fmt.Println("soak: armed")
			}
		default:
		}
		if armedFlag.Load() && !r.armed.Load() {
			r.arm()
		}
		if time.Now().After(end) {
			break
		}
		r.issue()
		// Advance until an operation completes or a message arrives (Wait
		// does not advance when its condition already holds), or a
		// while has passed: the budget scenario's hold ends by time.
		ev := r.events
		step, cancelStep := context.WithTimeout(traffic, 50*time.Millisecond)
		r.c.Wait(step, func() bool {
			return r.events != ev || armedFlag.Load() != r.armed.Load() || r.checkKill()
		})
		cancelStep()
		r.checkKill()
		r.releaseHeld(false)
	}
	r.releaseHeld(true)
	// Drain: every operation completes or fails within the bound, or it is
	// a hang.
	drain, cancelDrain := context.WithTimeout(context.Background(), r.drainBound)
	r.c.Wait(drain, func() bool { return r.inFlight == 0 && r.recvOpen == [nKinds]int{} })
	cancelDrain()
	// A peer may drain for up to drainBound before it says goodbye.
	r.goodbye(r.drainBound + 2*tcpTimeout + 3*time.Second)
	<-collDone
	r.res.Kinds[kColl] = coll[0]
	r.res.CollectivesTime = collTime
	r.res.ChecksumFailures += coll[1].Failed
	for _, e := range collErrs {
		var ce checkErr
		if errors.As(e, &ce) {
			r.sample(string(ce))
		} else {
			r.noteErr(e)
		}
	}
	r.res.Hangs = 0
	for k := range nKinds {
		ks := r.res.Kinds[k]
		if h := ks.Issued - ks.OK - ks.Failed; h > 0 {
			r.res.Hangs += h
			r.res.HangKinds = append(r.res.HangKinds, fmt.Sprintf("%s:%d", kindNames[k], h))
		}
		if h := r.recvOpen[k]; h > 0 {
			r.res.Hangs += uint64(h)
			r.res.HangKinds = append(r.res.HangKinds, fmt.Sprintf("receive %s:%d (%s)", kindNames[k], h, r.openNames(k)))
		}
	}
	for _, m := range r.mcasts {
		if m != "" {
			r.res.Mcasts = append(r.res.Mcasts, m)
		}
	}
	st := r.c.Stats()
	r.res.UnexpectedPeak, r.res.PeerFailures = st.UnexpectedPeak, st.PeerFailures
	if err := cl.Close(); err != nil {
		r.noteErr(fmt.Errorf("close: %w", err))
	}
	signal.Stop(usr1)
	r.res.GoroutinesAfter, r.res.FDsAfter = settle(r.res.GoroutinesBefore, r.res.FDsBefore)
	r.res.HeapAfter, r.res.RSSAfter = heapInUse(), rss()
	if r.res.FDsAfter > r.res.FDsBefore {
		for fd, t := range fdTargets() {
			if fds0[fd] != t {
				r.res.FDsLeft = append(r.res.FDsLeft, fd+" -> "+t)
			}
		}
	}
	out, _ := json.Marshal(&r.res)
	fmt.Printf("soak: result %s\n", out)
	return nil
}

// settle waits up to 3s for goroutines and descriptors to return to what
// they were before Open, and returns what they are.
func settle(g0, f0 int) (int, int) {
	deadline := time.Now().Add(3 * time.Second)
	for {
		runtime.GC()
		g, f := runtime.NumGoroutine(), countFDs()
		if (g <= g0 && f <= f0) || time.Now().After(deadline) {
			return g, f
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// warmNetpoll makes the Go runtime open its network poller's descriptors,
// which it keeps for the life of the process, before they are counted.
func warmNetpoll() {
	if l, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
		l.Close()
	}
}

// fdTargets maps this process's descriptors to what they are.
func fdTargets() map[string]string {
	es, _ := os.ReadDir("/proc/self/fd")
	out := map[string]string{}
	for _, e := range es {
		t, _ := os.Readlink("/proc/self/fd/" + e.Name())
		out[e.Name()] = t
	}
	return out
}

func countFDs() int {
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(es) - 1 // the directory being read
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func rss() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n << 10
		}
	}
	return 0
}

// noteErr counts an error reported to this rank, by the rank it names.
func (r *rank) noteErr(err error) {
	var pe *amigo.PeerError
	if errors.As(err, &pe) && int(pe.Addr.Rank) >= 0 && int(pe.Addr.Rank) < r.n && int(pe.Addr.Rank) != r.me {
		r.res.ErrNamed[pe.Addr.Rank]++
		// A multicast names the target where the chain broke, which may
		// be alive and well (its own forwarding failed): only other
		// errors make this rank stop talking to the peer.
		if !errors.Is(err, amigo.ErrMulticast) {
			r.failed[pe.Addr.Rank] = true
		}
	} else {
		r.res.ErrUnnamed++
	}
	r.sample(err.Error())
}

// sample keeps a few distinct error texts for the report.
func (r *rank) sample(s string) {
	if len(r.res.ErrSamples) >= 4 {
		return
	}
	for _, x := range r.res.ErrSamples {
		if x == s {
			return
		}
	}
	r.res.ErrSamples = append(r.res.ErrSamples, s)
}

// peer picks a destination this rank has no error from, or -1.
func (r *rank) peer() int {
	start := r.rng.IntN(r.n)
	for i := range r.n {
		p := (start + i) % r.n
		if p != r.me && !r.failed[p] {
			return p
		}
	}
	return -1
}

func (r *rank) slice(n int) ([]byte, uint32) {
	off := r.rng.IntN(poolSize - n + 1)
	b := r.pool[off : off+n]
	return b, crc32.Checksum(b, castagnoli)
}

// track counts an operation of kind k of n bytes issued and returns its
// completion callback.
func (r *rank) track(k int, n int, then func(err error)) func(error) {
	r.res.Kinds[k].Issued++
	r.inFlight++
	r.bytesOut += n
	return func(err error) {
		r.events++
		r.inFlight--
		r.bytesOut -= n
		if err != nil {
			r.res.Kinds[k].Failed++
			r.noteErr(fmt.Errorf("%s: %w", kindNames[k], err))
		} else {
			r.res.Kinds[k].OK++
			r.res.Kinds[k].Bytes += uint64(n)
		}
		if then != nil {
			then(err)
		}
	}
}

// issue posts operations until the in-flight bounds are reached.
func (r *rank) issue() {
	if r.scenario == "budget" && r.me != r.victim && r.armed.Load() && time.Since(r.armedAt) < budgetHold+time.Second {
		// Flood the slow receiver with messages below the STOP threshold,
		// which it holds in its unexpected budget.
		for r.inFlight < maxInFlight && r.bytesOut < maxBytesOut && !r.failed[r.victim] {
			r.send(r.victim, kEager, 16<<10+r.rng.IntN(40<<10))
		}
	}
	for try := 0; try < 2*maxInFlight && r.inFlight < maxInFlight && r.bytesOut < maxBytesOut; try++ {
		p := r.peer()
		if p < 0 {
			return
		}
		x := r.rng.IntN(100)
		if r.mix != nil {
			x = r.mix[r.rng.IntN(len(r.mix))]
		}
		switch {
		case x < 40:
			r.send(p, kInline, r.rng.IntN(1024))
		case x < 60:
			r.send(p, kEager, 4<<10+r.rng.IntN(56<<10))
		case x < 72:
			r.send(p, kLarge, 128<<10+r.rng.IntN(3<<20))
		case x < 82:
			r.get(p)
		case x < 92:
			r.put(p)
		default:
			r.multicast()
		}
	}
}

func (r *rank) send(p, k, n int) {
	data, crc := r.slice(n)
	r.seq++
	h := header{kind: uint8(k), src: uint16(r.me), n: uint32(n), seq: r.seq, crc: crc}
	hb := h.put(make([]byte, hdrLen))
	done := r.track(k, n, func(err error) {
		if err == nil {
			r.res.SentOK[p]++
		}
	})
	if err := r.c.Send(amigo.EndpointOf(p), dMsg, hb, data, done); err != nil {
		done(err)
	}
}

func (r *rank) get(p int) {
	n := 1 + r.rng.IntN(256<<10)
	off := r.rng.IntN(getRegion - n + 1)
	buf := make([]byte, n)
	done := r.track(kGet, n, func(err error) {
		if err == nil && !bytes.Equal(buf, r.gets[p][off:off+n]) {
			r.res.ChecksumFailures++
			r.sample(fmt.Sprintf("soak: GET of %d bytes at %d from rank %d: wrong data", n, off, p))
		}
	})
	if err := r.c.Get(amigo.EndpointOf(p), buf, r.getReg.Key(p), uint64(off), done); err != nil {
		done(err)
	}
}

// put writes into this rank's slot of p's PUT region and notifies p, which
// checks the slot and answers with dPutAck; one Put per peer is in flight.
func (r *rank) put(p int) {
	if r.putBusy[p] {
		return
	}
	n := 1 + r.rng.IntN(putSlot)
	data, crc := r.slice(n)
	r.seq++
	off := uint64(r.me * putSlot)
	h := header{kind: kPut, src: uint16(r.me), n: uint32(n), seq: r.seq, crc: crc, off: off}
	r.putBusy[p] = true
	done := r.track(kPut, n, func(err error) {
		if err == nil {
			r.res.SentOK[p]++
		}
	})
	if err := r.c.PutNotify(amigo.EndpointOf(p), data, r.putReg.Key(p), off, dPut, h.put(make([]byte, hdrLen)), done); err != nil {
		done(err)
	}
}

// multicast sends to every peer with no error, in random order; one
// multicast per origin is in flight.
func (r *rank) multicast() {
	if r.mcastBusy {
		return
	}
	var targets []amigo.Endpoint
	for p := range r.n {
		if p != r.me && !r.failed[p] {
			targets = append(targets, amigo.EndpointOf(p))
		}
	}
	if len(targets) < 2 {
		return
	}
	r.rng.Shuffle(len(targets), func(i, j int) { targets[i], targets[j] = targets[j], targets[i] })
	n := 64<<10 + r.rng.IntN(2<<20)
	data, crc := r.slice(n)
	r.seq++
	h := header{kind: kMcast, src: uint16(r.me), n: uint32(n), seq: r.seq, crc: crc}
	way := amigo.MulticastForward
	if r.rng.IntN(2) == 0 {
		way = amigo.MulticastStoreForward
	}
	r.mcastBusy = true
	wayName := map[amigo.MulticastWay]string{amigo.MulticastForward: "forward", amigo.MulticastStoreForward: "store-and-forward"}[way]
	copy(r.mcasts[:], r.mcasts[1:])
	last := &r.mcasts[len(r.mcasts)-1]
	*last = fmt.Sprintf("#%d (%d B, %s) to %v: in flight", r.seq, n, wayName, targets)
	done := r.track(kMcast, n, func(err error) {
		r.mcastBusy = false
		// One multicast at a time (mcastBusy): it is the last remembered.
		outcome := "ok"
		if err != nil {
			outcome = err.Error()
		}
		*last = strings.TrimSuffix(*last, "in flight") + outcome
		if err == nil {
			for _, t := range targets {
				r.res.SentOK[t.Rank]++
			}
		}
	})
	if err := r.c.MulticastWith(&amigo.MulticastParams{Targets: targets, Dispatch: dMcast, Header: h.put(make([]byte, hdrLen)), Data: data, Way: way, Sent: done}); err != nil {
		done(err)
	}
}

// accept checks a message's header for duplicates and order; false: drop it.
func (r *rank) accept(h header, ok bool, ordered bool) bool {
	if !ok || int(h.src) >= r.n {
		r.res.ChecksumFailures++
		r.sample(fmt.Sprintf("soak: malformed header from rank %d", h.src))
		return false
	}
	if _, dup := r.seen[h.src][h.seq]; dup {
		r.res.Duplicates++
		r.sample(fmt.Sprintf("soak: duplicate message %d from rank %d", h.seq, h.src))
		return false
	}
	r.seen[h.src][h.seq] = struct{}{}
	if ordered {
		if h.seq < r.lastSeq[h.src] {
			r.res.OutOfOrder++
		}
		r.lastSeq[h.src] = h.seq
	}
	return true
}

func (r *rank) verify(h header, data []byte) {
	if len(data) != int(h.n) || crc32.Checksum(data, castagnoli) != h.crc {
		r.res.ChecksumFailures++
		r.sample(fmt.Sprintf("soak: message %d (%s, %d bytes) from rank %d: checksum mismatch", h.seq, kindNames[h.kind%nKinds], h.n, h.src))
		return
	}
	r.res.Delivered[h.src]++
	r.res.DeliveredBytes += uint64(len(data))
}

func (r *rank) onMsg(c *amigo.Context, m *amigo.Message) {
	r.events++
	h, ok := parseHeader(m.Header)
	if !r.accept(h, ok, true) {
		return
	}
	if m.Inline() {
		r.verify(h, m.Data)
		return
	}
	if r.holding {
		d, err := m.Defer()
		if err == nil {
			r.held = append(r.held, deferred{d: d, h: h})
			r.res.Held++
			return
		}
		r.noteErr(fmt.Errorf("defer: %w", err))
	}
	r.receive(m, h)
}

func (r *rank) receive(m *amigo.Message, h header) {
	buf := make([]byte, m.Size())
	r.receiving(h, true)
	if err := m.Receive(buf, func(err error) { r.received(h, buf, err) }); err != nil {
		r.received(h, buf, err)
	}
}

// receiving counts a receive of announced data started; received counts
// it ended. One still open after the drain neither completed nor failed.
func (r *rank) receiving(h header, start bool) {
	k := int(h.kind) % nKinds
	if start {
		r.recvOpen[k]++
		r.openRecv = append(r.openRecv, h)
		return
	}
	r.recvOpen[k]--
	for i, o := range r.openRecv {
		if o.src == h.src && o.seq == h.seq && o.kind == h.kind {
			r.openRecv = slices.Delete(r.openRecv, i, i+1)
			break
		}
	}
}

// openNames names the receives of kind k still open: sender, sequence
// number and size of each, the first few.
func (r *rank) openNames(k int) string {
	var names []string
	for _, h := range r.openRecv {
		if int(h.kind)%nKinds == k && len(names) < 4 {
			names = append(names, fmt.Sprintf("rank %d #%d, %d B", h.src, h.seq, h.n))
		}
	}
	return strings.Join(names, "; ")
}

func (r *rank) received(h header, buf []byte, err error) {
	r.events++
	r.receiving(h, false)
	if err != nil {
		r.res.ReceiveFailures++
		r.noteErr(fmt.Errorf("receive %s: %w", kindNames[h.kind%nKinds], err))
		return
	}
	r.verify(h, buf)
}

// releaseHeld accepts the messages held by the budget scenario's slow
// receiver once its time is up (or at once if now).
func (r *rank) releaseHeld(now bool) {
	if !r.holding || (!now && time.Since(r.armedAt) < budgetHold) {
		return
	}
	r.holding = false
	for _, d := range r.held {
		buf := make([]byte, d.h.n)
		h := d.h
		r.receiving(h, true)
		if err := r.c.Accept(d.d, buf, func(err error) { r.received(h, buf, err) }); err != nil {
			r.received(h, buf, err)
		}
	}
	r.held = nil
}

func (r *rank) onPut(c *amigo.Context, m *amigo.Message) {
	r.events++
	h, ok := parseHeader(m.Header)
	if !r.accept(h, ok, false) {
		return
	}
	if h.off+uint64(h.n) > uint64(len(r.putMem)) {
		r.res.ChecksumFailures++
		return
	}
	r.verify(h, r.putMem[h.off:h.off+uint64(h.n)])
	if err := c.SendImmediate(m.Source, dPutAck, nil, nil); err != nil {
		r.noteErr(fmt.Errorf("put acknowledgement: %w", err))
	}
}

func (r *rank) onPutAck(c *amigo.Context, m *amigo.Message) {
	r.events++
	r.putBusy[m.Source.Rank] = false
}

func (r *rank) onMcast(c *amigo.Context, m *amigo.Message) {
	r.events++
	h, ok := parseHeader(m.Header)
	if !r.accept(h, ok, false) {
		return
	}
	r.receive(m, h)
}

func (r *rank) onBye(c *amigo.Context, m *amigo.Message) { r.byeFrom[m.Source.Rank] = true }

// goodbye tells every peer with no error that this rank sends no more, and
// waits (bounded) for theirs, so that no rank closes while a peer still
// sends to it.
func (r *rank) goodbye(bound time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	// Every peer gets one, even one this rank has an error from: it may
	// not have one from this rank, and wait for it.
	for p := range r.n {
		if p == r.me {
			continue
		}
		wasFailed := r.failed[p]
		err := r.c.SendWith(&amigo.SendParams{Dest: amigo.EndpointOf(p), Dispatch: dBye,
			RemoteDone: func(err error) {
				switch {
				case err == nil || wasFailed:
				case errors.Is(err, amigo.ErrClosed):
					// The peer closed in order without acknowledging
					// its goodbye: an acknowledgement lost at close.
					r.res.ByeAckErrors++
					r.sample("goodbye: " + err.Error())
				default:
					r.noteErr(fmt.Errorf("goodbye: %w", err))
				}
				r.byeAcked[p] = true
			}})
		if err != nil {
			if !wasFailed {
				r.noteErr(fmt.Errorf("goodbye: %w", err))
			}
			r.byeAcked[p] = true
		}
	}
	all := func() bool {
		for p := range r.n {
			if p != r.me && !r.failed[p] && !(r.byeFrom[p] && r.byeAcked[p]) {
				return false
			}
		}
		return true
	}
	r.c.Wait(ctx, all)
	for p := range r.n {
		if p != r.me && !r.failed[p] && !(r.byeFrom[p] && r.byeAcked[p]) {
			r.res.ByeMissing = append(r.res.ByeMissing, p)
		}
	}
}

// arm starts the rank's part of the fault: the victim of a kill scenario
// watches for the protocol phase it must die in; the slow receiver of the
// budget scenario starts holding messages.
func (r *rank) arm() {
	r.armed.Store(true)
	r.armedAt = time.Now()
	r.killMark = r.c.Stats()
	if r.me != r.victim {
		return
	}
	switch {
	case r.scenario == "budget":
		r.holding = true
	case strings.HasPrefix(r.scenario, "kill-"):
		r.killPending = true
		if r.scenario == "kill-inline" {
			// Die with inline messages in flight: posted, some written,
			// none acknowledged.
			for range 64 {
				if p := r.peer(); p >= 0 {
					r.send(p, kInline, r.rng.IntN(1024))
				}
			}
			r.c.Advance()
			r.die("inline")
		}
		if r.scenario == "kill-eager" {
			// A stream that cannot finish in one advance.
			if p := r.peer(); p >= 0 {
				r.send(p, kLarge, 3<<20)
			}
		}
	}
}

// checkKill kills the victim once the phase of its scenario is under way.
func (r *rank) checkKill() bool {
	if !r.killPending {
		return false
	}
	st, m := r.c.Stats(), r.killMark
	switch r.scenario {
	case "kill-eager":
		if st.EagerBytesSent > m.EagerBytesSent {
			r.die("eager: streaming")
		}
	case "kill-stop":
		if st.Stops > m.Stops {
			r.die("stop: STOP sent")
		}
	case "kill-get":
		if st.FetchedBytes > m.FetchedBytes {
			r.die("rendezvous GET: fetching")
		}
	case "kill-put":
		if st.PutBytes > m.PutBytes {
			r.die("put: PUT after STOP")
		}
	case "kill-mcast":
		if st.MulticastBytesPut > m.MulticastBytesPut {
			r.die("multicast: forwarding")
		}
	}
	return false
}

// die reports the phase and kills this process.
func (r *rank) die(phase string) {
	os.Stdout.WriteString("soak: killed in " + phase + "\n")
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// collectives runs Allreduce and Bcast with known results on context 1,
// then a barrier. It returns counts ([0]) and checksum failures
// ([1].Failed), and the errors it met.
func (r *rank) collectives(end time.Time) (st [2]KindStats, errs []error) {
	// They may outlast the traffic (the driver then injects no fault), but
	// not the drain's bound.
	ctx, cancel := context.WithDeadline(context.Background(), end.Add(r.drainBound))
	defer cancel()
	if os.Getenv("SOAK_NOCOLL") != "" {
		return st, nil
	}
	comm, err := mpi.World(ctx, r.cl.Context(1), nil)
	if err != nil {
		return st, []error{err}
	}
	rng := rand.New(rand.NewPCG(r.seed, 999)) // the same on every rank
	op := func(f func() error) bool {
		st[0].Issued++
		if err := f(); err != nil {
			errs = append(errs, err)
			if !errors.Is(err, context.DeadlineExceeded) {
				st[0].Failed++ // else it neither completed nor failed
			}
			return false
		}
		st[0].OK++
		return true
	}
	for i := range collRounds {
		n := 1 + rng.IntN(16<<10)
		send, recv := make([]int64, n), make([]int64, n)
		for j := range send {
			send[j] = int64(r.me+1)*int64(j+i) ^ int64(r.seed&0xffff)
		}
		if !op(func() error { return mpi.Allreduce(ctx, comm, send, recv, mpi.Sum) }) {
			return st, errs
		}
		for j := range recv {
			var want int64
			for q := range r.n {
				want += int64(q+1)*int64(j+i) ^ int64(r.seed&0xffff)
			}
			if recv[j] != want {
				st[1].Failed++
				errs = append(errs, checkErr(fmt.Sprintf("soak: Allreduce %d: element %d is %d, want %d", i, j, recv[j], want)))
				break
			}
		}
		root := i % r.n
		m := 1 + rng.IntN(64<<10)
		buf := make([]int64, m)
		if r.me == root {
			for j := range buf {
				buf[j] = int64(j*31+i) ^ int64(r.seed)
			}
		}
		if !op(func() error { return mpi.Bcast(ctx, comm, buf, root) }) {
			return st, errs
		}
		for j := range buf {
			if buf[j] != int64(j*31+i)^int64(r.seed) {
				st[1].Failed++
				errs = append(errs, checkErr(fmt.Sprintf("soak: Bcast %d from %d: element %d wrong", i, root, j)))
				break
			}
		}
	}
	op(func() error { return comm.Barrier(ctx) })
	st[0].Bytes = 0
	return st, errs
}
