package mpi

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/amigo-hpc/amigo"
)

// Dynamic windows (MPI_Win_create_dynamic): a window with no memory when
// it is made, to which each rank attaches memory of its own and detaches
// it again, without the others taking part. A displacement in a dynamic
// window is an address in the target's process (Address gives it; the
// program sends it to the origins, as MPI programs send MPI_Get_address's
// result), and the displacement unit is 1.
//
// Each rank publishes its attachments in a table in its window's control
// region, next to the lock word: per attachment its address, length and
// key. An origin reads a target's table with a Get (the target's program
// takes no part) when it first accesses the target after a
// synchronisation (Lock, LockAll, Fence, Start) and whenever an address is
// in no attachment it knows of, and keeps it until the next
// synchronisation: an attachment made before the synchronisation that
// made its address known is found.
//
// Table, from byte dynTableOff of the control region (little endian):
//
//	bytes 0-7      slots in use (the highest used slot + 1)
//	then per slot  address, length, key (8 bytes each), 8 bytes zero;
//	               a free slot has key 0

const (
	dynTableOff = 64
	dynMax      = 64 // attachments per rank
	dynSlot     = 32
	dynCtlSize  = dynTableOff + 8 + dynMax*dynSlot
)

// dynState is a dynamic window's: this rank's attachments, and the tables
// of the others as last read (nil: to read).
type dynState struct {
	att  []attachment
	tabs [][]dynEntry
	buf  []byte // a table read from a target
}

type attachment struct {
	mem  []byte
	reg  *amigo.MemRegion
	slot int
}

type dynEntry struct {
	addr, len uint64
	key       amigo.Key
}

// Address returns the address of b's first element, the displacement of
// memory attached to a dynamic window (MPI_Get_address); 0 for an empty b.
func Address(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	return int(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

// WinCreateDynamic makes a window with no memory on every rank of c
// (MPI_Win_create_dynamic): Attach exposes memory, Detach withdraws it.
// Collective over c.
func WinCreateDynamic(ctx context.Context, c *Comm) (*Win, error) {
	return newWin(ctx, c, nil, 1, false, true)
}

// Attach exposes mem through the window (MPI_Win_attach): the others
// address it by Address(mem) and the following bytes. Local: no other rank
// takes part. mem stays the caller's and must not be released before
// Detach or Free; attachments may not overlap.
func (w *Win) Attach(mem []byte) error {
	if err := w.enter(); err != nil {
		return err
	}
	defer w.leave()
	d := w.dyn
	if d == nil {
		return fmt.Errorf("%w: Attach to a window not made by WinCreateDynamic", ErrWin)
	}
	if len(mem) == 0 {
		return fmt.Errorf("%w: Attach of no memory", ErrCount)
	}
	lo := uint64(Address(mem))
	for _, a := range d.att {
		alo := uint64(Address(a.mem))
		if lo < alo+uint64(len(a.mem)) && alo < lo+uint64(len(mem)) {
			return fmt.Errorf("%w: Attach of %d bytes at %#x overlaps an attachment", ErrWin, len(mem), lo)
		}
	}
	used := make([]bool, dynMax)
	for _, a := range d.att {
		used[a.slot] = true
	}
	slot := -1
	for i, u := range used {
		if !u {
			slot = i
			break
		}
	}
	if slot < 0 {
		return fmt.Errorf("%w: more than %d attachments to a dynamic window", ErrWin, dynMax)
	}
	reg, err := w.ac.Client().RegisterMemory(mem)
	if err != nil {
		return errorf("mpi: Attach: %w", err)
	}
	d.att = append(d.att, attachment{mem: mem, reg: reg, slot: slot})
	e := w.slotWords(slot)
	atomic.StoreUint64(&e[0], lo)
	atomic.StoreUint64(&e[1], uint64(len(mem)))
	atomic.StoreUint64(&e[2], uint64(reg.Key()))
	n := w.tableWords()
	if uint64(slot+1) > atomic.LoadUint64(n) {
		atomic.StoreUint64(n, uint64(slot+1))
	}
	return nil
}

// Detach withdraws memory Attach exposed (MPI_Win_detach): mem must be the
// slice attached, or start where it starts. Local.
func (w *Win) Detach(mem []byte) error {
	if err := w.enter(); err != nil {
		return err
	}
	defer w.leave()
	d := w.dyn
	if d == nil {
		return fmt.Errorf("%w: Detach from a window not made by WinCreateDynamic", ErrWin)
	}
	for i, a := range d.att {
		if len(mem) > 0 && Address(a.mem) == Address(mem) {
			w.unpublish(a)
			d.att = append(d.att[:i], d.att[i+1:]...)
			if err := a.reg.Deregister(); err != nil {
				return errorf("mpi: Detach: %w", err)
			}
			return nil
		}
	}
	return fmt.Errorf("%w: Detach of memory at %#x, which is not attached", ErrWin, Address(mem))
}

func (w *Win) unpublish(a attachment) {
	e := w.slotWords(a.slot)
	atomic.StoreUint64(&e[2], 0)
	atomic.StoreUint64(&e[0], 0)
	atomic.StoreUint64(&e[1], 0)
}

// detachAll withdraws every attachment, when the window is freed.
func (w *Win) detachAll() {
	if w.dyn == nil {
		return
	}
	for _, a := range w.dyn.att {
		w.unpublish(a)
		_ = a.reg.Deregister()
	}
	w.dyn.att = nil
}

// tableWords returns the table's count word; slotWords a slot's words.
func (w *Win) tableWords() *uint64 {
	return (*uint64)(unsafe.Pointer(&w.ctl.Bytes()[dynTableOff]))
}

func (w *Win) slotWords(slot int) *[4]uint64 {
	return (*[4]uint64)(unsafe.Pointer(&w.ctl.Bytes()[dynTableOff+8+slot*dynSlot]))
}

// local resolves n bytes at at of this rank's window (an offset, or an
// address in a dynamic window) to memory: the region and the offset in it.
func (w *Win) local(at, n uint64) ([]byte, uint64, bool) {
	if w.dyn == nil {
		if at > uint64(len(w.mem)) || n > uint64(len(w.mem))-at {
			return nil, 0, false
		}
		return w.mem, at, true
	}
	for _, a := range w.dyn.att {
		lo := uint64(Address(a.mem))
		if at >= lo && at-lo <= uint64(len(a.mem)) && n <= uint64(len(a.mem))-(at-lo) {
			return a.mem, at - lo, true
		}
	}
	return nil, 0, false
}

// forget drops the tables read from the targets, at a synchronisation.
func (w *Win) forget() {
	if w.dyn != nil {
		clear(w.dyn.tabs)
	}
}

// dynTarget resolves an access of n bytes at address addr of rank r.
func (w *Win) dynTarget(r int, addr, n uint64) (place, error) {
	if n == 0 {
		return place{at: addr}, nil
	}
	if p, ok := findEntry(w.dyn.tabs[r], addr, n); ok {
		return p, nil
	}
	if err := w.readTable(r); err != nil {
		return place{}, err
	}
	if p, ok := findEntry(w.dyn.tabs[r], addr, n); ok {
		return p, nil
	}
	return place{}, fmt.Errorf("%w: %d bytes at address %#x of rank %d, where no attached memory holds them", ErrRMARange, n, addr, r)
}

func findEntry(tab []dynEntry, addr, n uint64) (place, bool) {
	for _, e := range tab {
		if addr >= e.addr && addr-e.addr <= e.len && n <= e.len-(addr-e.addr) {
			return place{key: e.key, off: addr - e.addr, size: e.len, skew: uint8(e.addr & 7), at: addr}, true
		}
	}
	return place{}, false
}

// dynReadTimeout bounds the read of a target's table: the AMI serves it
// without the target's program, so only a lost peer delays it.
const dynReadTimeout = time.Minute

// readTable reads rank r's table of attachments with a Get, and waits for
// it; the caller holds the engine's lock.
func (w *Win) readTable(r int) error {
	d := w.dyn
	var tab []dynEntry
	if r == w.comm.rank {
		for _, a := range d.att {
			tab = append(tab, dynEntry{addr: uint64(Address(a.mem)), len: uint64(len(a.mem)), key: a.reg.Key()})
		}
		d.tabs[r] = tab
		return nil
	}
	var gerr error
	done := false
	if err := w.ac.Get(w.eps[r], d.buf, w.ctlKeys[r], dynTableOff, func(err error) { gerr, done = err, true; w.comm.e.events++ }); err != nil {
		return errorf("mpi: reading rank %d's attachments: %w", r, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dynReadTimeout)
	defer cancel()
	if err := w.comm.e.wait(ctx, func() bool { return done }); err != nil {
		return errorf("mpi: reading rank %d's attachments: %w", r, err)
	}
	if gerr != nil {
		return errorf("mpi: reading rank %d's attachments: %w", r, gerr)
	}
	used := min(binary.LittleEndian.Uint64(d.buf), dynMax)
	tab = make([]dynEntry, 0, used)
	for i := uint64(0); i < used; i++ {
		b := d.buf[8+i*dynSlot:]
		e := dynEntry{addr: binary.LittleEndian.Uint64(b), len: binary.LittleEndian.Uint64(b[8:]), key: amigo.Key(binary.LittleEndian.Uint64(b[16:]))}
		if e.key != 0 && e.addr+e.len >= e.addr {
			tab = append(tab, e)
		}
	}
	d.tabs[r] = tab
	return nil
}
