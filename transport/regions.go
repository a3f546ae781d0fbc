package transport

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/amigo-hpc/amigo/internal/nap"
)

// Key names a registered memory region of one rank. The low 24 bits index the
// rank's region table; the high 40 bits are a generation that changes with
// every registration, so a key stays invalid once its region was
// deregistered, even after the table entry is reused. Zero is never a key.
type Key uint64

const (
	keyIndexBits = 24
	keyIndexMask = 1<<keyIndexBits - 1
	maxRegions   = 1 << keyIndexBits
)

func (k Key) index() uint32 { return uint32(k & keyIndexMask) }

// Errors of region access.
var (
	// ErrBadKey reports a key that names no registered region.
	ErrBadKey = errors.New("no such memory region")
	// ErrBounds reports an access outside a region.
	ErrBounds = errors.New("access outside memory region")
	// ErrNilBuffer reports a registration of no memory.
	ErrNilBuffer = errors.New("nil or empty buffer")
)

// AccessError describes a refused access to registered memory.
type AccessError struct {
	Key       Key
	Off, Len  uint64
	RegionLen uint64 // length of the region when Err is ErrBounds
	Err       error
}

func (e *AccessError) Error() string {
	if errors.Is(e.Err, ErrBounds) {
		return fmt.Sprintf("key %#x: [%d, %d) outside region of %d bytes", uint64(e.Key), e.Off, e.Off+e.Len, e.RegionLen)
	}
	return fmt.Sprintf("key %#x: %v", uint64(e.Key), e.Err)
}

func (e *AccessError) Unwrap() error { return e.Err }

// Regions is the table of memory regions a rank registered for one-sided
// access by its peers. Register and Deregister are slow paths and take a
// lock; Acquire and Release, used by engines serving GET and PUT, are
// lock-free.
//
// Memory ordering: an entry's mem is written only while its state is zero and
// no access is in flight, and is then published by the atomic store of state.
// An accessor increments inflight, then loads state and compares it with the
// key; only on a match does it read mem. Deregister stores zero to state, then
// waits until inflight is zero; an accessor that increments inflight after that
// sees state zero and never reads mem, and the decrement of every accessor that
// did read it happens before Deregister returns.
type Regions struct {
	mu      sync.Mutex
	tab     atomic.Pointer[[]*region]
	free    []uint32
	gen     uint64
	closed  atomic.Bool
	mirrors []Mirror // under mu
}

// Mirror publishes a rank's region table to peers that access registered
// memory without the owner's CPU: through a shared-memory segment, or by
// cross-memory attach. The calls are made under the table's lock, one at a
// time, in the order of the registrations they report.
type Mirror interface {
	// Registered reports that key, at index of the table, now names mem. It
	// runs inside Register, once the entry is live for local accessors.
	Registered(index int, key Key, mem []byte, perm Perm)
	// Deregistered reports that key no longer names a region. It runs
	// inside Deregister, after local accessors are refused and before
	// Deregister waits for those in progress; it returns only once no peer
	// accesses the region through the mirror any more.
	Deregistered(index int, key Key)
}

// MirrorBatch is a Mirror that withdraws several registrations with one
// wait for the peers' accesses: Regions.DeregisterAll calls DeregisteredAll
// once instead of Deregistered for each key.
//
// # Why
//
// A mirror in memory a peer reads makes each withdrawal a store into a
// cache line the peer last read, and the wait that follows must see that
// store made visible first (a fence): the trip of the line to the other
// core and back, once per registration. A sender that fetched windows of
// messages deregisters a send buffer for each acknowledgement it takes,
// and did so one after another: on a 2-core AMD host whose cores passed a
// line in 0.35 us, 62 acknowledgements of a window of 32 KiB messages took
// the sender 18 us, while the receiver had sent them in 5.
type MirrorBatch interface {
	Mirror
	// DeregisteredAll is Deregistered for every key of keys (zero keys are
	// skipped): it returns only once no peer accesses any of their
	// regions through the mirror any more.
	DeregisteredAll(keys []Key)
}

// AddMirror makes m see every region registered now and every later
// Register and Deregister.
func (r *Regions) AddMirror(m Mirror) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, e := range *r.tab.Load() {
		if k := e.state.Load(); k != 0 {
			m.Registered(i, Key(k), e.mem, e.perm)
		}
	}
	r.mirrors = append(r.mirrors[:len(r.mirrors):len(r.mirrors)], m)
}

// RemoveMirror stops reporting to m.
func (r *Regions) RemoveMirror(m Mirror) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Mirror, 0, len(r.mirrors))
	for _, x := range r.mirrors {
		if x != m {
			out = append(out, x)
		}
	}
	r.mirrors = out
}

type region struct {
	state    atomic.Uint64 // the key of the live registration, or 0
	inflight atomic.Int64
	mem      []byte
	perm     Perm
}

// Perm is what peers may do to a registered region.
type Perm uint8

// Permissions.
const (
	PermGet    Perm = 1 << iota // read it by Get
	PermPut                     // write it by Put
	PermAtomic                  // operate on its words by remote atomics
	PermAll    = PermGet | PermPut | PermAtomic
)

// ErrPermission reports an access its region's registration does not permit.
var ErrPermission = errors.New("access not permitted by the region's registration")

// PermFor is the permission an RDMA operation needs.
func PermFor(k RDMAKind) Perm {
	switch k {
	case Get:
		return PermGet
	case Put:
		return PermPut
	case Atomic:
		return PermAtomic
	}
	return PermAll
}

// firstRegions is the number of entries the table gets when the first
// region is registered: a window of 64 large sends in flight, each with its
// registration, fits without growing the table again.
const firstRegions = 128

// NewRegions returns an empty table.
func NewRegions() *Regions {
	r := &Regions{}
	var seed [8]byte
	_, _ = rand.Read(seed[:])
	r.gen = binary.LittleEndian.Uint64(seed[:]) >> keyIndexBits
	tab := make([]*region, 0, firstRegions)
	r.tab.Store(&tab)
	return r
}

// Register makes mem accessible to peers holding the returned key, for
// every operation, until Deregister.
func (r *Regions) Register(mem []byte) (Key, error) { return r.RegisterPerm(mem, PermAll) }

// RegisterPerm makes mem accessible to peers holding the returned key, for
// the operations perm permits, until Deregister.
func (r *Regions) RegisterPerm(mem []byte, perm Perm) (Key, error) {
	if perm&^PermAll != 0 || perm == 0 {
		return 0, fmt.Errorf("amigo: permission %#x: want a non-empty set of PermGet, PermPut, PermAtomic", uint8(perm))
	}
	if len(mem) == 0 {
		return 0, ErrNilBuffer
	}
	if r.closed.Load() {
		return 0, ErrClosed
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	tab := *r.tab.Load()
	var idx uint32
	if n := len(r.free); n > 0 {
		idx = r.free[n-1]
		r.free = r.free[:n-1]
	} else {
		if len(tab) >= maxRegions {
			return 0, fmt.Errorf("amigo: more than %d registered regions", maxRegions)
		}
		// Double the table (readers hold the old slice: it is copied, not
		// extended in place), so that a program whose number of live
		// registrations creeps up allocates log-many times, not on
		// each new peak. The new entries but the first go on the free
		// list, lowest index last, to be taken first.
		n := min(max(len(tab), firstRegions), maxRegions-len(tab))
		grown := make([]*region, len(tab), len(tab)+n)
		copy(grown, tab)
		batch := make([]region, n)
		for i := range batch {
			grown = append(grown, &batch[i])
		}
		idx = uint32(len(tab))
		r.free = slices.Grow(r.free, n-1)
		for i := len(grown) - 1; i > int(idx); i-- {
			r.free = append(r.free, uint32(i))
		}
		r.tab.Store(&grown)
		tab = grown
	}
	r.gen++
	if r.gen&(1<<(64-keyIndexBits)-1) == 0 {
		r.gen++
	}
	key := Key(r.gen<<keyIndexBits | uint64(idx))
	e := tab[idx]
	e.mem = mem
	e.perm = perm
	e.state.Store(uint64(key))
	for _, m := range r.mirrors {
		m.Registered(int(idx), key, mem, perm)
	}
	return key, nil
}

// Deregister revokes access through key. It waits for accesses in progress
// to finish, so that once it returns no peer touches the memory.
func (r *Regions) Deregister(key Key) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	tab := *r.tab.Load()
	idx := key.index()
	if key == 0 || int(idx) >= len(tab) || !tab[idx].state.CompareAndSwap(uint64(key), 0) {
		return &AccessError{Key: key, Err: ErrBadKey}
	}
	for _, m := range r.mirrors {
		m.Deregistered(int(idx), key)
	}
	r.retire(tab, idx)
	return nil
}

// retire waits until no local access of entry idx of tab, withdrawn from
// every mirror, is in progress, and frees it.
func (r *Regions) retire(tab []*region, idx uint32) {
	e := tab[idx]
	for spins := 0; e.inflight.Load() != 0; spins++ {
		if spins < 100 {
			runtime.Gosched()
		} else {
			nap.Nap(50 * time.Microsecond)
		}
	}
	e.mem = nil
	r.free = append(r.free, idx)
}

// DeregisterAll is Deregister for every key of keys, with one wait for the
// peers' accesses of them all where a mirror can (MirrorBatch). A key that
// names no registered region is set to zero in keys and skipped; the error
// reports the first such. Once it returns, no peer touches the memory of
// any of the others.
func (r *Regions) DeregisterAll(keys []Key) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	tab := *r.tab.Load()
	var err error
	for i, key := range keys {
		idx := key.index()
		if key == 0 || int(idx) >= len(tab) || !tab[idx].state.CompareAndSwap(uint64(key), 0) {
			if err == nil {
				err = &AccessError{Key: key, Err: ErrBadKey}
			}
			keys[i] = 0
		}
	}
	for _, m := range r.mirrors {
		if b, ok := m.(MirrorBatch); ok {
			b.DeregisteredAll(keys)
			continue
		}
		for _, key := range keys {
			if key != 0 {
				m.Deregistered(int(key.index()), key)
			}
		}
	}
	for _, key := range keys {
		if key != 0 {
			r.retire(tab, key.index())
		}
	}
	return err
}

// Len returns the length of the region named by key, or an error.
func (r *Regions) Len(key Key) (int, error) {
	b, a, err := r.Acquire(key, 0, 0)
	if err != nil {
		return 0, err
	}
	n := cap(b)
	a.Release()
	return n, nil
}

// Access is an access to a region in progress; Release ends it.
type Access struct{ e *region }

// Release ends the access.
func (a Access) Release() {
	if a.e != nil {
		a.e.inflight.Add(-1)
	}
}

// Acquire returns the n bytes at off of the region named by key, checked
// against the region's bounds. The bytes stay accessible until Release, even
// if the region is deregistered meanwhile. The returned slice's capacity ends
// at the end of the region.
func (r *Regions) Acquire(key Key, off, n uint64) ([]byte, Access, error) {
	if r.closed.Load() {
		return nil, Access{}, &AccessError{Key: key, Off: off, Len: n, Err: ErrClosed}
	}
	tab := *r.tab.Load()
	idx := key.index()
	if key == 0 || int(idx) >= len(tab) {
		return nil, Access{}, &AccessError{Key: key, Off: off, Len: n, Err: ErrBadKey}
	}
	e := tab[idx]
	e.inflight.Add(1)
	if e.state.Load() != uint64(key) {
		e.inflight.Add(-1)
		return nil, Access{}, &AccessError{Key: key, Off: off, Len: n, Err: ErrBadKey}
	}
	size := uint64(len(e.mem))
	if off > size || n > size-off {
		e.inflight.Add(-1)
		return nil, Access{}, &AccessError{Key: key, Off: off, Len: n, RegionLen: size, Err: ErrBounds}
	}
	return e.mem[off : off+n : size], Access{e}, nil
}

// AcquireFor is Acquire for an operation that needs perm: a region
// registered without it is refused with ErrPermission.
func (r *Regions) AcquireFor(key Key, off, n uint64, perm Perm) ([]byte, Access, error) {
	mem, acc, err := r.Acquire(key, off, n)
	if err != nil {
		return nil, acc, err
	}
	if acc.e.perm&perm != perm {
		acc.Release()
		return nil, Access{}, &AccessError{Key: key, Off: off, Len: n, Err: ErrPermission}
	}
	return mem, acc, nil
}

// Close refuses every later access. It does not wait for accesses in
// progress.
func (r *Regions) Close() { r.closed.Store(true) }
