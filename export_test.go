package amigo

import "github.com/amigo-hpc/amigo/transport"

// Asleep reports whether c's goroutine has armed its doorbell and entered
// its sleep n times or more: a ring now wakes a sleeping consumer (or one
// at the door of its sleep, which then returns at once).
func Asleep(c *Context, n uint64) bool { return c.bell.Armed() && c.bell.Sleeping() >= n }

// Slept returns how many times c's goroutine entered a sleep, and how many
// rings woke it (or pre-empted a sleep it had armed).
func Slept(c *Context) (sleeps, rings uint64) { return c.bell.Sleeping(), c.bell.Rings() }

// Descriptors returns how many descriptors c has written into the
// descriptor buffer toward ep, pads included: fewer than the messages
// sent when small messages shared slots as records. Call it on c's
// goroutine.
func Descriptors(c *Context, ep Endpoint) uint64 {
	idx, err := c.peerIndex(ep)
	if err != nil || c.peers[idx] == nil {
		return 0
	}
	return c.peers[idx].msg.Injected()
}

// SendRegKeys returns the keys of the registrations sends from one buffer
// share now (sendreg.go). Call it on c's goroutine.
func SendRegKeys(c *Context) []uint64 {
	var keys []uint64
	for _, r := range c.sendRegs.e {
		if r.ptr != nil {
			keys = append(keys, uint64(r.key))
		}
	}
	return keys
}

// KeyLive reports whether key names a region registered by c's client.
func KeyLive(c *Context, key uint64) bool {
	_, err := c.client.regions.Len(transport.Key(key))
	return err == nil
}
