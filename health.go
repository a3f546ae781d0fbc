package amigo

// PeerErr returns the error the path to the peer at ep failed with — its
// process gone, its connection lost or silent beyond the adapter's timeout,
// the peer closed, or the launcher lost it (ErrLost) — or nil while the peer is reachable (and for the
// context itself). The error is a *PeerError naming ep. PeerErr connects
// to the peer on first use, so that the adapter watches it from then on;
// a layer that must notice a peer's failure while it has nothing in flight
// with it (a receive that waits for the peer's message) asks here.
//
// PeerErr belongs to the context's owner: call it where Advance may be
// called, or from a callback or a Wait condition. It makes no system call
// once the peer is connected.
func (c *Context) PeerErr(ep Endpoint) error {
	idx, err := c.peerIndex(ep)
	if err != nil {
		return err
	}
	if ep.Rank == c.client.rank && ep.Context == c.index {
		return nil
	}
	if l := c.client.lost; l != nil && l.has(ep.Rank) {
		return peerErr(ep, ErrLost)
	}
	p := c.peer(idx)
	if p.failed != nil {
		return asPeerErr(ep, p.failed)
	}
	if err := p.link.Err(); err != nil {
		return asPeerErr(ep, err)
	}
	return nil
}
