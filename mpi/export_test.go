package mpi

// AssumeOversubscribed makes the collectives of c's rank choose as they do
// on a host with more ranks than processors, wherever its ranks run.
func AssumeOversubscribed(c *Comm) { c.e.oversub = true }

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
