package mpi

// AssumeOversubscribed makes the collectives of c's rank choose as they do
// on a host with more ranks than processors, wherever its ranks run.
func AssumeOversubscribed(c *Comm) { c.e.oversub = true }
