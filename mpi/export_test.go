package mpi

// AssumeOversubscribed makes the collectives of c's rank choose as they do
// on a host with more ranks than processors, wherever its ranks run.
func AssumeOversubscribed(c *Comm) { c.e.oversub = true }

// DieInAgree makes this process kill itself (SIGKILL) in its next
// agreement, when it is about to send a message of kind ("propose" or
// "decided") of round (0 for a decision) to rank to, once every message
// it sent before has left.
func DieInAgree(kind string, round, to int, die func()) {
	k := byte(agreePropose)
	if kind == "decided" {
		k = agreeDecided
	}
	testAgreeSend = func(a *agreement, kind byte, r, i int) {
		if kind != k || r != round || i != to {
			return
		}
		// The messages posted so far leave first: the others get them.
		for n := 0; n < 1_000_000 && a.sent < a.posted; n++ {
			a.e.held.Advance()
		}
		die()
	}
}

// WinUsers returns w's users word: the count of origins using remote
// atomics on this rank's window, with the bit of a plain update (BulkBit).
func WinUsers(w *Win) *uint64 { return w.usersWord() }

// WinPlainUpdates returns how many accumulates this rank applied to its
// window with plain loads and stores.
func WinPlainUpdates(w *Win) uint64 {
	w.comm.e.lock()
	defer w.comm.e.unlock()
	return w.plainUpdates
}

// BulkBit is the users word's bit of a plain update.
const BulkBit = bulkBit

// WinRescues returns how many times this rank took accumulate messages
// back from a target that did not answer.
func WinRescues(w *Win) uint64 {
	w.comm.e.lock()
	defer w.comm.e.unlock()
	return w.rescues
}

// SharedColl reports whether c's Barrier and small Allreduce go through a
// shared-memory segment of c.
func SharedColl(c *Comm) bool { return c.shmState == shmOn }

// WinOwed reports whether w has operations this rank issued to target that
// a Flush must still complete: pending at the origin, or Puts the AMI has
// not flushed.
func WinOwed(w *Win, target int) bool {
	w.comm.e.lock()
	defer w.comm.e.unlock()
	return w.pending > 0 || w.put[target]
}

// WinInPlaceUpdates returns how many accumulates this rank applied in
// place to other ranks' windows.
func WinInPlaceUpdates(w *Win) uint64 {
	w.comm.e.lock()
	defer w.comm.e.unlock()
	return w.inPlaceUpdates
}

// SetRescueHook sets the function a rescue runs between applying a message
// to its copy of the target's memory and putting the copy back; nil
// removes it.
func SetRescueHook(f func()) { rescueHook = f }

// RecvWaiting reports whether a Recv on c waits in the engine's expected
// slot (recvExpected) rather than as a posted request.
func RecvWaiting(c *Comm) bool {
	c.e.lock()
	defer c.e.unlock()
	return c.e.exp.on && c.e.exp.comm == c
}
