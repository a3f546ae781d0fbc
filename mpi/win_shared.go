package mpi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Shared-memory windows (MPI_Win_allocate_shared): the ranks of one host
// allocate one segment together, each its part, one after the other in
// rank order (each part's length rounded up to 8 bytes, so that every part
// starts aligned for atomics), and every rank maps all of it: a rank loads
// and stores its peers' parts directly, through the slices SharedQuery
// returns, and uses the window's Put, Get and atomics as on any other.
//
// The segment is a memfd file the lowest rank makes: it has no name, so
// nothing is left behind however the job ends; the others map it through
// /proc/PID/fd of the maker, as the shm adapter maps its segments, and the
// maker closes its descriptor once every rank holds a mapping. Free unmaps
// it.

// WinAllocateShared makes a window of size bytes on every rank of c, in
// one segment every rank of c maps (MPI_Win_allocate_shared): c's ranks
// must all run on this host (split a larger communicator first with
// SplitType(SplitShared)). Memory returns this rank's part; SharedQuery
// any rank's. Collective over c.
func WinAllocateShared(ctx context.Context, c *Comm, size, dispUnit int) (*Win, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if size < 0 {
		return nil, fmt.Errorf("%w: WinAllocateShared of %d bytes", ErrCount, size)
	}
	if dispUnit < 1 {
		return nil, fmt.Errorf("%w: displacement unit %d", ErrWin, dispUnit)
	}
	cl := c.e.ac.Client()
	for r, ep := range c.eps {
		if ep.Rank == c.e.rank {
			continue
		}
		pi, err := cl.Peer(ep.Rank)
		if err != nil {
			return nil, err
		}
		if !pi.SameHost {
			return nil, fmt.Errorf("%w: WinAllocateShared over ranks of several hosts (rank %d runs on another host than rank %d); split the communicator with SplitType(SplitShared) first", ErrWin, r, c.rank)
		}
	}
	sizes := make([]int64, c.size)
	if err := Allgather(ctx, c, []int64{int64(size)}, sizes); err != nil {
		return nil, errorf("mpi: WinAllocateShared: %w", err)
	}
	offs := make([]int, c.size+1)
	for r, s := range sizes {
		offs[r+1] = offs[r] + (int(s)+7)&^7
	}
	total := max(offs[c.size], 8)
	seg, err := mapShared(ctx, c, total)
	if err != nil {
		return nil, err
	}
	mine := seg[offs[c.rank] : offs[c.rank]+size : offs[c.rank]+size]
	w, err := newWin(ctx, c, mine, dispUnit, false, false)
	if err != nil {
		_ = unix.Munmap(seg)
		return nil, err
	}
	w.segment, w.segOffs = seg, offs
	w.segSizes = make([]int, c.size)
	for r, s := range sizes {
		w.segSizes[r] = int(s)
	}
	return w, nil
}

// makeSegment creates a zeroed memory file of size bytes named name,
// readable by this user only, and maps it; where is this process's id and
// the file's descriptor, by which the other ranks of the host map it
// (mapPeerSegment). On an error it returns what it made so far, for
// closeShared, and where left zero.
func makeSegment(name string, size int) (fd int, seg []byte, where []int64, err error) {
	where = []int64{0, 0}
	fd, err = unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return -1, nil, where, err
	}
	if err = unix.Fchmod(fd, 0o600); err == nil {
		err = unix.Ftruncate(fd, int64(size))
	}
	if err == nil {
		seg, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	}
	if err == nil {
		where = []int64{int64(os.Getpid()), int64(fd)}
	}
	return fd, seg, where, err
}

// mapShared makes (on rank 0 of c) and maps (on every rank) a segment of
// size bytes. Collective: it fails on every rank if it fails on one.
func mapShared(ctx context.Context, c *Comm, size int) ([]byte, error) {
	sh := shareSegment(ctx, c, "amigo-win", size)
	switch {
	case sh.local != nil:
		return nil, errorf("mpi: WinAllocateShared, a segment of %d bytes: %w", size, sh.local)
	case sh.coll != nil:
		return nil, errorf("mpi: WinAllocateShared: %w", sh.coll)
	case sh.others:
		return nil, fmt.Errorf("%w: WinAllocateShared: another rank could not map the segment", ErrWin)
	}
	return sh.seg, nil
}

// sharedSegment is what shareSegment made: the segment and its maker's
// process id and descriptor, or why not.
type sharedSegment struct {
	seg   []byte
	where [2]int64
	// local is this rank's failure to make or map the segment (set only
	// once the ranks got as far as agreeing); coll the failure of a
	// collective that shares or agrees on it; others says another rank
	// could not map it.
	local, coll error
	others      bool
}

// errNoMaker is a rank's local failure when rank 0 could not make the
// segment.
var errNoMaker = errors.New("rank 0 could not make the segment")

// shareSegment makes (on rank 0 of c, a memory file named name) and maps
// (on every rank) a zeroed segment of size bytes. Collective: every rank
// learns whether all mapped it; a rank that returns with any failure has
// unmapped what it had.
func shareSegment(ctx context.Context, c *Comm, name string, size int) sharedSegment {
	var sh sharedSegment
	fd := -1
	var seg []byte
	var err error
	where := []int64{0, 0}
	if c.rank == 0 {
		fd, seg, where, err = makeSegment(name, size)
	}
	if berr := Bcast(ctx, c, where, 0); berr != nil {
		closeShared(fd, seg)
		sh.coll = berr
		return sh
	}
	if c.rank != 0 && where[0] != 0 {
		seg, err = mapPeerSegment(int(where[0]), int(where[1]), size)
	}
	if where[0] == 0 && err == nil {
		err = errNoMaker
	}
	failed := []int32{0}
	if err != nil {
		failed[0] = 1
	}
	all := []int32{0}
	aerr := Allreduce(ctx, c, failed, all, Max)
	if c.rank == 0 && fd >= 0 {
		_ = unix.Close(fd) // every rank that could has mapped it
	}
	sh.local, sh.coll, sh.others = err, aerr, all[0] != 0
	if err != nil || aerr != nil || all[0] != 0 {
		closeShared(-1, seg)
		return sh
	}
	sh.seg, sh.where = seg, [2]int64(where)
	return sh
}

func closeShared(fd int, seg []byte) {
	if fd >= 0 {
		_ = unix.Close(fd)
	}
	if seg != nil {
		_ = unix.Munmap(seg)
	}
}

// mapPeerSegment maps size bytes of the memfd process pid holds as fd,
// after checking that the file is that large: no access through the
// mapping can fault.
func mapPeerSegment(pid, fd, size int) ([]byte, error) {
	path := "/proc/" + strconv.Itoa(pid) + "/fd/" + strconv.Itoa(fd)
	f, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(f)
	var st unix.Stat_t
	if err := unix.Fstat(f, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size < int64(size) {
		return nil, fmt.Errorf("%s: not a segment of %d bytes", path, size)
	}
	seg, err := unix.Mmap(f, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", path, err)
	}
	return seg, nil
}

// SharedQuery returns rank r's part of a window of WinAllocateShared, as
// this rank maps it, and its displacement unit (MPI_Win_shared_query):
// loads and stores through it reach r's memory directly. They are ordered
// with r's own as any shared memory is: by Sync (a full barrier) on both
// sides around a synchronisation (Barrier, a message, a lock), or by
// sync/atomic.
func (w *Win) SharedQuery(r int) ([]byte, int, error) {
	if err := w.enter(); err != nil {
		return nil, 0, err
	}
	defer w.leave()
	if w.segment == nil {
		return nil, 0, fmt.Errorf("%w: SharedQuery on a window not made by WinAllocateShared", ErrWin)
	}
	if err := w.rank(r); err != nil {
		return nil, 0, err
	}
	lo := w.segOffs[r]
	hi := lo + w.segSizes[r]
	return w.segment[lo:hi:hi], w.units[r], nil
}

// unmap releases a shared window's segment, once Free deregistered it.
func (w *Win) unmap() {
	if w.segment != nil {
		_ = unix.Munmap(w.segment)
		w.segment, w.mem = nil, nil
	}
}
