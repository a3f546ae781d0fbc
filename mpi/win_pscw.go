package mpi

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/amigo-hpc/amigo"
)

// Generalised active target synchronisation (MPI_Win_post, start,
// complete, wait): a target opens an exposure epoch to a group of origins
// with Post, and closes it with Wait (or Test); an origin opens an access
// epoch to a group of targets with Start, and closes it with Complete. Only
// the ranks that communicate synchronise, where Fence synchronises all.
//
// Post sends each origin of its group a notice; Start waits for the notice
// of each target of its group (with ModeNoCheck on both sides, neither is
// sent nor awaited: the program knows the matching Post was called).
// Complete completes the origin's operations at their targets (as Flush
// does) and then sends each target a notice; Wait returns once the notice
// of each origin of its group arrived, so the window's memory holds every
// operation of the epoch. The notices are small active messages of the
// layer (kindRMACtl) counted per rank: a Post for the next epoch may
// arrive before the origin's Start of this one consumed the last.
//
// Header of a notice:
//
//	bytes 0-3   window id
//	bytes 4-7   the sender's rank in the window's communicator
//	byte  12    kind: kindRMACtl
//	byte  13    ctlPost or ctlComplete

// ModeNoCheck, for Post and Start, says that the matching Post calls
// (for Start) were already made, or that the matching Start calls will
// find them so (for Post): no notice is sent or awaited. Both sides of an
// epoch must pass it, or neither.
const ModeNoCheck = 1 << 4

const (
	ctlPost = iota + 1
	ctlComplete
)

// groupRanks maps g's members to ranks of the window's communicator.
func (w *Win) groupRanks(g *Group, what string) ([]int, error) {
	if err := g.check(); err != nil {
		return nil, err
	}
	ranks := make([]int, 0, g.Size())
	for _, wr := range g.world {
		r := -1
		for i, ep := range w.comm.eps {
			if ep.Rank == wr {
				r = i
				break
			}
		}
		if r < 0 {
			return nil, fmt.Errorf("%w: %s group has world rank %d, which is not in the window", ErrRank, what, wr)
		}
		ranks = append(ranks, r)
	}
	return ranks, nil
}

// Post opens an exposure epoch of this rank's window to the origins of g
// (MPI_Win_post): their Puts, Gets and accumulates between their Start
// and Complete may target this rank. It does not wait.
func (w *Win) Post(g *Group, assert int) error {
	if err := w.enter(); err != nil {
		return err
	}
	defer w.leave()
	if w.posted != nil {
		return fmt.Errorf("%w: Post inside an exposure epoch (Wait first)", ErrRMASync)
	}
	if w.fenceOpen {
		return fmt.Errorf("%w: Post inside a Fence epoch (Fence with ModeNoSucceed first)", ErrRMASync)
	}
	ranks, err := w.groupRanks(g, "Post")
	if err != nil {
		return err
	}
	if assert&ModeNoCheck == 0 {
		for _, r := range ranks {
			if err := w.notify(r, ctlPost); err != nil {
				return err
			}
		}
	}
	w.posted = ranks
	return nil
}

// Start opens an access epoch to the targets of g (MPI_Win_start): it
// returns once each has posted its exposure epoch (not waiting with
// ModeNoCheck), or ctx ended.
func (w *Win) Start(ctx context.Context, g *Group, assert int) error {
	if err := w.enter(); err != nil {
		return err
	}
	defer w.leave()
	if w.started != nil {
		return fmt.Errorf("%w: Start inside an access epoch (Complete first)", ErrRMASync)
	}
	if err := w.passiveOrFence("Start"); err != nil {
		return err
	}
	ranks, err := w.groupRanks(g, "Start")
	if err != nil {
		return err
	}
	if assert&ModeNoCheck == 0 {
		if err := w.comm.e.wait(ctx, func() bool { return allPositive(w.postIn, ranks) }); err != nil {
			return errorf("mpi: Start, waiting for the targets' Post: %w", err)
		}
		for _, r := range ranks {
			w.postIn[r]--
		}
	}
	for _, r := range ranks {
		w.access[r] = true
	}
	w.started = ranks
	w.forget()
	return nil
}

// passiveOrFence refuses an access epoch while another is open.
func (w *Win) passiveOrFence(what string) error {
	if w.fenceOpen {
		return fmt.Errorf("%w: %s inside a Fence epoch (Fence with ModeNoSucceed first)", ErrRMASync, what)
	}
	if w.lockAll {
		return fmt.Errorf("%w: %s inside LockAll", ErrRMASync, what)
	}
	for r, l := range w.locks {
		if l != 0 {
			return fmt.Errorf("%w: %s while rank %d is locked", ErrRMASync, what, r)
		}
	}
	return nil
}

func allPositive(counts []int, ranks []int) bool {
	for _, r := range ranks {
		if counts[r] <= 0 {
			return false
		}
	}
	return true
}

// Complete closes the access epoch Start opened (MPI_Win_complete): every
// operation this rank issued in it is complete at its target, and each
// target is told, when it returns. The epoch is closed even when an
// operation failed; the first failure is returned.
func (w *Win) Complete(ctx context.Context) error {
	if err := w.enter(); err != nil {
		return err
	}
	defer w.leave()
	if w.started == nil {
		return fmt.Errorf("%w: Complete without Start", ErrRMASync)
	}
	ranks := w.started
	w.started = nil
	for _, r := range ranks {
		w.access[r] = false
	}
	err := w.flushAll(ctx)
	if derr := w.dropAllAtomics(ctx); err == nil {
		err = derr
	}
	for _, r := range ranks {
		if nerr := w.notify(r, ctlComplete); err == nil {
			err = nerr
		}
	}
	return err
}

// Wait closes the exposure epoch Post opened (MPI_Win_wait): it returns
// once every origin of the group called Complete, so that the window's
// memory holds their operations, or ctx ended (the epoch stays open then).
func (w *Win) Wait(ctx context.Context) error {
	if err := w.enter(); err != nil {
		return err
	}
	defer w.leave()
	if w.posted == nil {
		return fmt.Errorf("%w: Wait without Post", ErrRMASync)
	}
	ranks := w.posted
	if err := w.comm.e.wait(ctx, func() bool { return allPositive(w.completeIn, ranks) }); err != nil {
		return errorf("mpi: Wait for the origins' Complete: %w", err)
	}
	w.endExposure()
	return nil
}

// Test is Wait that does not wait (MPI_Win_test): it reports whether every
// origin called Complete, and closes the exposure epoch if so.
func (w *Win) Test() (bool, error) {
	if err := w.enter(); err != nil {
		return false, err
	}
	defer w.leave()
	if w.posted == nil {
		return false, fmt.Errorf("%w: Test without Post", ErrRMASync)
	}
	if !allPositive(w.completeIn, w.posted) {
		w.comm.e.advanceOnce()
		if !allPositive(w.completeIn, w.posted) {
			return false, nil
		}
	}
	w.endExposure()
	return true, nil
}

func (w *Win) endExposure() {
	for _, r := range w.posted {
		w.completeIn[r]--
	}
	w.posted = nil
}

// notify sends rank r of the window a synchronisation notice.
func (w *Win) notify(r int, what byte) error {
	var h [hdrLen]byte
	binary.LittleEndian.PutUint32(h[0:], uint32(w.comm.id))
	binary.LittleEndian.PutUint32(h[4:], uint32(w.comm.rank))
	h[12], h[13] = kindRMACtl, what
	if err := w.comm.e.held.SendImmediate(w.eps[r], w.comm.e.disp, h[:], nil); err != nil {
		return errorf("mpi: notice to rank %d of the window: %w", r, err)
	}
	return nil
}

// onRMACtl counts a synchronisation notice.
func (e *engine) onRMACtl(m *amigo.Message) {
	h := m.Header
	if len(h) != hdrLen {
		e.stats.Malformed++
		return
	}
	w := e.wins[binary.LittleEndian.Uint32(h[0:])]
	src := int(binary.LittleEndian.Uint32(h[4:]))
	if w == nil || src < 0 || src >= len(w.postIn) {
		e.stats.Malformed++
		return
	}
	switch h[13] {
	case ctlPost:
		w.postIn[src]++
	case ctlComplete:
		w.completeIn[src]++
	default:
		e.stats.Malformed++
	}
}
