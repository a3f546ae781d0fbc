package mpi

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/amigo-hpc/amigo"
)

// One-sided communication (MPI's chapter 12, RMA): a window is memory every
// rank of a communicator exposes to the others' Put, Get, Accumulate and
// atomics, which the AMI carries as GET, PUT and remote atomics: the target's
// program takes no part in them, whatever it is doing.
//
// Each rank's window memory is an amigo region (RegisterMemory for WinCreate,
// AllocMemory for WinAllocate: a shared segment where ranks share a host, so
// that Puts and Gets are single copies and atomics the initiator's own
// instructions); a second small region of each rank's holds its lock word
// (and, for a dynamic window, its table of attachments). Window creation
// exchanges the keys, sizes and displacement units.
//
// The files, by chapter: win.go (creation, Free, Put and Get), win_sync.go
// (Flush, Sync, Fence, Lock), win_pscw.go (Post, Start, Complete, Wait),
// win_atomic.go (accumulates and atomics by remote atomics), win_am.go
// (accumulates the owner applies), win_req.go (Rput, Rget, Raccumulate),
// win_vector.go (strided target layouts), win_shared.go
// (WinAllocateShared), win_dynamic.go (WinCreateDynamic), win_inplace.go
// (accumulates an origin applies in place over shared memory).
//
// Over shared memory, a Put or Get into a window of WinAllocate is one
// copy the AMI makes at once on the calling goroutine through its mapping
// of the target's segment (PutNow, GetNow), and a one-element atomic one
// instruction there (AtomicNow): complete when the call returns, so that
// Flush then owes the target nothing (MPICH's and Open MPI's shared-memory
// windows do the same with loads and stores).
//
// Accumulate, GetAccumulate, FetchAndOp and CompareAndSwap are atomic per
// element, as MPI requires. One element is one remote atomic when the AMI
// has its operation (Sum on integers and float64, Band, Bor, Bxor on
// integers, Replace, and NoOp's fetch, on 4 or 8 bytes), else a
// compare-and-swap loop on the aligned 4- or 8-byte word that holds it,
// whose other bytes the swap leaves as they were: neither needs the
// target's program. More than one element travel as one message the
// target's layer applies with the processor's atomic instructions
// (win_am.go), as do complex128 elements (16 bytes, wider than any remote
// atomic, and touched by nothing else); user ops, which only the origin
// can compute, take the per-element loop. MinLoc and MaxLoc are refused.
//
// Synchronisation: Fence and Post/Start/Complete/Wait (active target),
// Lock/Unlock and LockAll/UnlockAll (passive target; the lock is a word of
// the target's that initiators take with remote atomics, so the target need
// not call into mpi), Flush, FlushAll, FlushLocal, FlushLocalAll and Sync.
// A Put, Get or accumulate outside an access epoch to its target (after a
// Fence that opens one, between Start and Complete, between Lock and
// Unlock) is refused with ErrRMASync, and touches nothing.

// Errors of one-sided communication.
var (
	// ErrRMASync reports an RMA call outside an epoch that allows it: a
	// Put without Fence, Start or Lock, an Unlock without Lock, a
	// Complete without Start, a Wait without Post, a Lock while the
	// target is locked already, Free with locks held.
	ErrRMASync = errors.New("mpi: RMA synchronisation error")
	// ErrRMARange reports an access outside the target's window (or
	// outside its attached memory, in a dynamic window), or an element
	// the target's displacement unit puts out of its alignment.
	ErrRMARange = errors.New("mpi: RMA access outside the window")
	// ErrWin reports a nil or freed window, or a window argument that
	// does not fit (a displacement unit below 1).
	ErrWin = errors.New("mpi: invalid window")
)

// The operations only one-sided accumulates take.
const (
	opReplace opCode = 100 + iota
	opNoOp
)

var (
	// Replace, in Accumulate, stores the origin's elements into the
	// target's (MPI_REPLACE); in GetAccumulate it is an atomic swap.
	Replace = Op{code: opReplace, name: "Replace"}
	// NoOp, in GetAccumulate and FetchAndOp, fetches the target's
	// elements atomically and changes nothing (MPI_NO_OP).
	NoOp = Op{code: opNoOp, name: "NoOp"}
)

// LockType is the kind of a passive-target lock.
type LockType int

// Lock types.
const (
	// LockExclusive excludes every other lock on the target's window.
	LockExclusive LockType = iota + 1
	// LockShared admits other shared locks, and no exclusive one.
	LockShared
)

// Fence assertions (MPI_MODE_*): hints a Fence may use. ModeNoSucceed
// says no RMA call follows the fence (it closes the epoch); ModeNoPrecede
// says none preceded it.
const (
	ModeNoPrecede = 1 << iota
	ModeNoSucceed
	ModeNoStore
	ModeNoPut
)

// lockExcl is the lock word's value for an exclusive holder; shared holders
// count below it.
const lockExcl = 1 << 32

// Win is a window of memory exposed to one-sided operations by every rank
// of a communicator. Like the communicator's, its calls may come from any
// goroutine: each takes the engine's lock while it touches the window's
// state, and the operations' callbacks run under it (threads.go).
type Win struct {
	comm *Comm // a duplicate of the creating communicator
	ac   *amigo.Context
	mem  []byte
	reg  *amigo.MemRegion
	ctl  *amigo.MemRegion // lock word of this rank's window, at offset 0
	// per rank: keys of window memory and lock word, window size in
	// bytes, displacement unit, the window base address modulo 8.
	keys, ctlKeys []amigo.Key
	sizes         []uint64
	units         []int
	skew          []uint8
	eps           []amigo.Endpoint

	fenceOpen bool
	// put[r]: a Put to rank r was issued since its last flush. A Put
	// completes at the origin when its buffer may be reused; only an AMI
	// flush completes it at the target. Gets and atomics complete where
	// they act, so a flush after them alone needs no AMI round trip.
	put     []bool
	locks   []LockType
	lockAll bool
	freed   bool

	// pending counts operations issued and not yet complete at the
	// origin; err keeps the first failure among them, reported by the
	// next call that completes them.
	pending int
	err     error
	done    func(error)
	settled func() bool // pending is zero; made once

	// Accumulates sent to their owners (win_am.go): by slot, the free
	// slots, and per target those awaiting their reply; elem is the
	// scratch of the owner's compare-and-swap loops; inline the AMI's
	// InlineMax.
	msgs    []*rmaMsg
	msgFree []uint16
	msgOut  []int
	elem    [2][16]byte
	one     [2][16]byte // accumulateOne's element and comparand
	inline  int

	// Generalised active target (win_pscw.go): the ranks of the access
	// epoch Start opened (access[r] for each) and of the exposure epoch
	// Post opened, nil when none is open; the Post and Complete notices
	// received, by rank, that Start and Wait have not consumed.
	started, posted    []int
	access             []bool
	postIn, completeIn []int

	reqFree *rmaReq      // request ties for reuse (win_req.go)
	updFree []*rmaUpdate // element updates for reuse (win_atomic.go)

	// A window of WinAllocateShared (win_shared.go): the segment as this
	// rank maps it, where each rank's part starts, and its length.
	segment           []byte
	segOffs, segSizes []int

	dyn *dynState // a window of WinCreateDynamic (win_dynamic.go)

	// near[r]: the AMI performs atomics on rank r's control region at
	// once, and r's window memory is amigo's (WinAllocate): accumulates
	// to r may be applied in place (win_inplace.go).
	near           []bool
	alloc          bool
	inPlace        inPlace
	inPlaceUpdates uint64 // accumulates this rank applied in place
	// atomUsers[r]: whether this rank counts in rank r's users word, for
	// remote atomics it issued in this epoch (win_atomic.go).
	atomUsers []userState
	// plainUpdates counts the accumulates applied to this rank's window
	// with plain loads and stores.
	plainUpdates uint64

	// Accumulate messages and their rescue (win_am.go, win_rescue.go),
	// per target: the sequence number of the last message sent, the
	// replies received, the reply count a rescue tick saw (plus one, 0
	// for none), whether a rescue is under way, whether accumulates go by
	// remote atomics until the epoch ends. The timer runs rescueTick.
	// rescueUser[t]: a rescue counted this rank in t's users word.
	// rescues counts the rescues started.
	// inflight[t] is the cost of the messages to t not yet answered
	// (win_am.go, accMsgs), at most msgBudget.
	inflight            []int
	msgBudget           int
	seq                 []uint32
	replies, rescueMark []uint64
	rescuing            []*rescueOp
	bypass, rescueUser  []bool
	rescueTimer         *time.Timer
	rescueAfter         time.Duration
	rescueArmed         bool
	rescues             uint64
}

// WinCreate makes a window of mem on every rank of c (MPI_Win_create): the
// ranks' mem may differ in length, and may be empty. dispUnit is the size
// in bytes that a displacement names on this rank (the element size of
// the slice mem views, usually). Collective over c; mem stays the caller's
// and must not be released before Free.
func WinCreate(ctx context.Context, c *Comm, mem []byte, dispUnit int) (*Win, error) {
	return newWin(ctx, c, mem, dispUnit, false, false)
}

// WinAllocate makes a window of size bytes that amigo allocates on every
// rank of c (MPI_Win_allocate): memory shared with the ranks of the host
// where the adapter has it, so that their Puts and Gets are single copies
// and their atomics the processor's own. Memory returns it. Collective over
// c.
func WinAllocate(ctx context.Context, c *Comm, size, dispUnit int) (*Win, error) {
	if size < 0 {
		return nil, fmt.Errorf("%w: WinAllocate of %d bytes", ErrCount, size)
	}
	return newWin(ctx, c, make([]byte, 0, size), dispUnit, true, false)
}

// newWin makes a window of mem (or of amigo's memory of cap(mem) bytes,
// alloc), or a dynamic one (dyn) with no memory yet.
func newWin(ctx context.Context, c *Comm, mem []byte, dispUnit int, alloc, dyn bool) (*Win, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if dispUnit < 1 {
		return nil, fmt.Errorf("%w: displacement unit %d", ErrWin, dispUnit)
	}
	ac := c.e.ac
	cl := ac.Client()
	w := &Win{ac: ac, mem: mem, locks: make([]LockType, c.size), put: make([]bool, c.size), msgOut: make([]int, c.size), inline: cl.Config().InlineMax,
		access: make([]bool, c.size), atomUsers: make([]userState, c.size), postIn: make([]int, c.size), completeIn: make([]int, c.size)}
	w.done = w.opDone
	w.near, w.alloc = make([]bool, c.size), alloc
	w.settled = func() bool { return w.pending == 0 }
	w.seq, w.replies, w.rescueMark = make([]uint32, c.size), make([]uint64, c.size), make([]uint64, c.size)
	w.rescuing, w.bypass, w.rescueUser = make([]*rescueOp, c.size), make([]bool, c.size), make([]bool, c.size)
	w.inflight, w.msgBudget = make([]int, c.size), max(cl.Config().RingSlots*64/4, 1024)
	w.rescueAfter = time.Duration(c.e.opts.AccumulateRescue) * time.Microsecond
	w.rescueTimer = time.AfterFunc(time.Hour, w.rescueTick)
	w.rescueTimer.Stop()
	var err error
	if alloc {
		size := cap(mem)
		if size > 0 {
			if w.reg, err = cl.AllocMemory(size); err != nil {
				return nil, errorf("mpi: WinAllocate: %w", err)
			}
			w.mem = w.reg.Bytes()[:size:size]
		} else {
			w.mem = nil
		}
	} else if len(mem) > 0 {
		if w.reg, err = cl.RegisterMemory(mem); err != nil {
			return nil, errorf("mpi: WinCreate: %w", err)
		}
	}
	ctlSize := ctlClaimOff
	if dyn {
		ctlSize = dynCtlSize
		w.dyn = &dynState{tabs: make([][]dynEntry, c.size), buf: make([]byte, dynCtlSize-dynTableOff)}
	}
	ctlSize += 8 * c.size // the claim words (win_rescue.go)
	if w.ctl, err = cl.AllocMemory(ctlSize); err != nil {
		w.release()
		return nil, errorf("mpi: window lock word: %w", err)
	}
	// Zero before anyone has the key: an allocation may reuse the memory
	// of a freed window, whose claim words end where its messages left
	// them.
	clear(w.ctl.Bytes())
	// Every rank's key, lock key, size, unit and skew, in one Allgather.
	const fields = 5
	mine := make([]uint64, fields)
	if w.reg != nil {
		mine[0] = uint64(w.reg.Key())
	}
	mine[1] = uint64(w.ctl.Key())
	mine[2] = uint64(len(w.mem))
	mine[3] = uint64(dispUnit)
	if len(w.mem) > 0 {
		mine[4] = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(w.mem))) & 7)
	}
	// The window's communicator first, and the window known by its id,
	// so that an accumulate that follows the exchange finds it.
	if w.comm, err = c.Dup(ctx); err != nil {
		w.release()
		return nil, errorf("mpi: window creation: %w", err)
	}
	w.register()
	all := make([]uint64, fields*c.size)
	if err := Allgather(ctx, w.comm, mine, all); err != nil {
		w.unregister()
		w.release()
		_ = w.comm.Free()
		return nil, errorf("mpi: window creation: %w", err)
	}
	n := c.size
	w.keys, w.ctlKeys = make([]amigo.Key, n), make([]amigo.Key, n)
	w.sizes, w.units, w.skew = make([]uint64, n), make([]int, n), make([]uint8, n)
	w.eps = w.comm.eps
	for r := 0; r < n; r++ {
		f := all[r*fields : (r+1)*fields]
		w.keys[r], w.ctlKeys[r] = amigo.Key(f[0]), amigo.Key(f[1])
		w.sizes[r], w.units[r], w.skew[r] = f[2], int(f[3]), uint8(f[4])
	}
	return w, nil
}

// register makes the window known to its engine by id.
func (w *Win) register() {
	e := w.comm.e
	e.lock()
	if e.wins == nil {
		e.wins = make(map[uint32]*Win)
	}
	e.wins[uint32(w.comm.id)] = w
	e.unlock()
}

func (w *Win) unregister() {
	e := w.comm.e
	e.lock()
	delete(e.wins, uint32(w.comm.id))
	e.unlock()
}

func (w *Win) release() {
	w.detachAll()
	if w.reg != nil {
		_ = w.reg.Deregister()
	}
	if w.ctl != nil {
		_ = w.ctl.Deregister()
	}
}

// Memory returns this rank's window memory: the caller's for WinCreate,
// amigo's for WinAllocate. Loads and stores to it race with the peers'
// one-sided operations except as the window's synchronisation orders them.
func (w *Win) Memory() []byte { return w.mem }

// Comm returns the window's communicator: a duplicate of the one it was
// created on, with the same group.
func (w *Win) Comm() *Comm { return w.comm }

// Free releases the window (MPI_Win_free): collective; it completes this
// rank's operations, waits for every rank to have done so, and withdraws
// the memory from the peers. Locks must have been released.
func (w *Win) Free(ctx context.Context) error {
	if w == nil {
		return fmt.Errorf("%w: nil", ErrWin)
	}
	e := w.comm.e
	e.lock()
	err := w.check()
	for r, l := range w.locks {
		if l != 0 && err == nil {
			err = fmt.Errorf("%w: Free with rank %d still locked", ErrRMASync, r)
		}
	}
	if w.lockAll && err == nil {
		err = fmt.Errorf("%w: Free inside LockAll", ErrRMASync)
	}
	if (w.started != nil || w.posted != nil) && err == nil {
		err = fmt.Errorf("%w: Free inside a Start or Post epoch", ErrRMASync)
	}
	if err != nil {
		e.unlock()
		return err
	}
	err = w.flushAll(ctx)
	if derr := w.dropAllAtomics(ctx); err == nil {
		err = derr
	}
	e.unlock()
	if berr := w.comm.Barrier(ctx); err == nil {
		err = berr
	}
	e.lock()
	w.freed = true
	w.rescueTimer.Stop()
	delete(e.wins, uint32(w.comm.id))
	w.release()
	w.unmap()
	e.unlock()
	if ferr := w.comm.Free(); err == nil {
		err = ferr
	}
	return err
}

func (w *Win) check() error {
	switch {
	case w == nil:
		return fmt.Errorf("%w: nil", ErrWin)
	case w.freed:
		return fmt.Errorf("%w: freed", ErrWin)
	}
	return w.comm.check()
}

// enter takes the engine's lock for a window call and checks the window;
// on nil it returns holding the lock, which leave releases.
func (w *Win) enter() error {
	if w == nil {
		return fmt.Errorf("%w: nil", ErrWin)
	}
	w.comm.e.lock()
	if err := w.check(); err != nil {
		w.comm.e.unlock()
		return err
	}
	return nil
}

func (w *Win) leave() { w.comm.e.unlock() }

// rank checks a target rank.
func (w *Win) rank(target int) error {
	if target < 0 || target >= len(w.sizes) {
		return fmt.Errorf("%w: target %d", ErrRank, target)
	}
	return nil
}

// opDone is every operation's done callback.
func (w *Win) opDone(err error) {
	w.pending--
	w.comm.e.events++ // a goroutine asleep in waitPending may be done
	if err != nil && w.err == nil {
		w.err = w.comm.e.peerFailure(err)
	}
}

// place is where an access lands: a region of the target's (its key, the
// byte offset in it, its length and its address modulo 8), and what the
// target's layer resolves itself (at: the offset in its window, or the
// address in a dynamic window).
type place struct {
	key  amigo.Key
	off  uint64
	size uint64
	skew uint8
	at   uint64
}

// target checks an access of n bytes at displacement disp of rank r's
// window, in an epoch that allows it, and returns where it lands.
func (w *Win) target(r, disp, n int) (place, error) {
	if err := w.check(); err != nil {
		return place{}, err
	}
	if r < 0 || r >= len(w.sizes) {
		return place{}, fmt.Errorf("%w: target %d of a window of %d ranks", ErrRank, r, len(w.sizes))
	}
	if !w.fenceOpen && !w.lockAll && w.locks[r] == 0 && !w.access[r] {
		return place{}, fmt.Errorf("%w: access to rank %d outside an access epoch (Fence, Start or Lock first)", ErrRMASync, r)
	}
	if disp < 0 || n < 0 {
		return place{}, fmt.Errorf("%w: displacement %d, %d bytes", ErrRMARange, disp, n)
	}
	if e := w.comm.e; e.ft.on {
		if err := w.comm.targetFailure(r); err != nil {
			return place{}, err
		}
	}
	if w.dyn != nil {
		return w.dynTarget(r, uint64(disp), uint64(n))
	}
	off := uint64(disp) * uint64(w.units[r])
	if off/uint64(w.units[r]) != uint64(disp) || off > w.sizes[r] || uint64(n) > w.sizes[r]-off {
		return place{}, fmt.Errorf("%w: %d bytes at displacement %d (unit %d) of rank %d's %d-byte window", ErrRMARange, n, disp, w.units[r], r, w.sizes[r])
	}
	return place{key: w.keys[r], off: off, size: w.sizes[r], skew: w.skew[r], at: off}, nil
}

// Put copies origin into rank target's window at displacement disp
// (MPI_Put). It completes at the origin by FlushLocal (origin may then be
// reused) and at the target by Flush, Unlock or Fence.
func (w *Win) Put(origin []byte, target, disp int) error {
	return w.rma(true, origin, target, disp, nil)
}

// Get copies len(origin) bytes of rank target's window at displacement
// disp into origin (MPI_Get); origin holds them after FlushLocal, Flush,
// Unlock or Fence.
func (w *Win) Get(origin []byte, target, disp int) error {
	return w.rma(false, origin, target, disp, nil)
}

// rma issues a Put (put) or a Get between origin and target's window; rq,
// if not nil, is the request that completes with it (win_req.go).
func (w *Win) rma(put bool, origin []byte, target, disp int, rq *rmaReq) error {
	if w == nil {
		return fmt.Errorf("%w: nil", ErrWin)
	}
	w.comm.e.lock()
	defer w.comm.e.unlock()
	pl, err := w.target(target, disp, len(origin))
	if err != nil {
		return err
	}
	done := w.done
	if rq != nil {
		done = rq.start(1)
	}
	if len(origin) == 0 {
		if rq != nil {
			rq.finish(nil)
		}
		return nil
	}
	// Over shared memory into a peer's shared allocation, the AMI copies
	// at once when nothing else to the target is in flight: the Put is
	// then complete at the target (no flush owes it anything), the Get's
	// data in origin, and neither counts as pending.
	var now bool
	if put {
		now, err = w.comm.e.held.PutNow(w.eps[target], origin, pl.key, pl.off, done)
		if err == nil && !now {
			w.put[target] = true
		}
	} else {
		now, err = w.comm.e.held.GetNow(w.eps[target], origin, pl.key, pl.off, done)
	}
	if now {
		if rq != nil {
			rq.finish(nil)
		}
		return nil
	}
	if err == nil {
		w.pending++
	}
	if err != nil {
		what := "Get from"
		if put {
			what = "Put to"
		}
		return errorf("mpi: %s rank %d: %w", what, target, w.comm.e.peerFailure(err))
	}
	return nil
}
