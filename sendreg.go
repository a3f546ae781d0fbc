package amigo

import (
	"unsafe"

	"github.com/amigo-hpc/amigo/transport"
)

// sendRegs shares one registration among the sends in flight from the same
// buffer: a send by announcement (injectSend, injectRTS) whose buffer,
// address and length, is that of a send still in flight takes that send's
// key instead of registering the buffer again, and the buffer is
// deregistered when the last of them completes. A registration never
// outlives the sends that hold it: once the last completes, the program
// may free or reuse the memory, and no key to it remains.
//
// # Why
//
// A window of sends from one buffer (osu_bw's, a halo exchange's) paid a
// registration and a deregistration for each message: the table's lock,
// a new key, and over shared memory the mirror entry's six sequentially
// consistent stores, which a peer reads (a line's trip between cores
// each), then the withdrawal's fenced store and the wait for the peers'
// accesses. On a 2-core AMD host whose cores pass a line in 0.3 us,
// perf of a window of 16 KiB messages announced and fetched put 30% of
// the sender's time in registering and deregistering (bench/MID_PATH.md).
//
// The entries are few: a program sends from few buffers at once, and a
// buffer that finds no free entry is registered on its own as before.
// The Context's owner alone uses them.
type sendRegs struct {
	e [sendRegSlots]sendReg
}

const sendRegSlots = 4

type sendReg struct {
	ptr  unsafe.Pointer // the buffer's first byte; nil when the entry is free
	n    int            // its length
	key  transport.Key
	refs int // sends in flight holding key
}

// sendKey returns the key of a registration of data for a send, shared
// with sends in flight from the same buffer; releaseSendKey gives it back.
func (c *Context) sendKey(data []byte) (transport.Key, error) {
	ptr := unsafe.Pointer(unsafe.SliceData(data))
	free := -1
	for i := range c.sendRegs.e {
		r := &c.sendRegs.e[i]
		if r.ptr == ptr && r.n == len(data) && r.refs > 0 {
			r.refs++
			c.stats.SendKeysShared++
			return r.key, nil
		}
		if r.ptr == nil && free < 0 {
			free = i
		}
	}
	key, err := c.client.regions.Register(data)
	if err != nil || free < 0 {
		return key, err
	}
	c.sendRegs.e[free] = sendReg{ptr: ptr, n: len(data), key: key, refs: 1}
	return key, nil
}

// dropSendKey gives back a send's hold on key and reports whether the
// registration is now to be deregistered: it was the send's own, or the
// last hold on a shared one.
func (c *Context) dropSendKey(key transport.Key) bool {
	for i := range c.sendRegs.e {
		r := &c.sendRegs.e[i]
		if r.key == key && r.ptr != nil {
			if r.refs--; r.refs > 0 {
				return false
			}
			*r = sendReg{}
			return true
		}
	}
	return true
}

// releaseSendKey gives back a send's hold on key, deregistering the
// buffer with the last hold.
func (c *Context) releaseSendKey(key transport.Key) {
	if key != 0 && c.dropSendKey(key) {
		_ = c.client.regions.Deregister(key)
	}
}
