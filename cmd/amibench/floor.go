package main

import (
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// floor measures the cross-core floor of any exchange between two ranks:
// ranks 0 and 1 ping-pong an atomic word, each spinning on its own cache
// line, with nothing else. Between processes the words live in a
// shared-memory file that amibench's launcher creates and every rank
// inherits (floorEnv names its descriptor); between goroutines (--transport
// loop) in Go memory.

const floorEnv = "AMIBENCH_FLOOR_FD"

func init() {
	register(Benchmark{Name: "floor", Doc: "atomic-flag ping-pong between ranks 0 and 1: the cross-core floor of one-way latency", Run: floorBench})
}

// localShared is what ranks that are goroutines of one process share.
type localShared struct {
	floor floorWords
}

type floorWords struct {
	ping atomic.Uint64
	_    [56]byte
	pong atomic.Uint64
	_    [56]byte
}

// newFloorFile makes the shared file for the floor benchmark.
func newFloorFile() (*os.File, error) {
	fd, err := unix.MemfdCreate("amibench-floor", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("floor: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, 4096); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "amibench-floor"), nil
}

func floorWordsOf(e *Env) (*floorWords, func(), error) {
	if e.shared != nil {
		return &e.shared.floor, func() {}, nil
	}
	s := os.Getenv(floorEnv)
	fd, err := strconv.Atoi(s)
	if s == "" || err != nil {
		return nil, nil, fmt.Errorf("floor needs amibench's own launcher (run amibench bare, or with --transport loop)")
	}
	mem, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("floor: map: %w", err)
	}
	return (*floorWords)(unsafe.Pointer(&mem[0])), func() { unix.Munmap(mem) }, nil
}

func floorBench(e *Env) error {
	e.Header("Cross-Core Floor: Atomic-Flag Ping-Pong", fOneWayNs)
	if err := e.Barrier(); err != nil {
		return err
	}
	if e.Rank > 1 {
		return nil
	}
	w, unmap, err := floorWordsOf(e)
	if err != nil {
		return err
	}
	defer unmap()
	if err := e.Barrier2(); err != nil {
		return err
	}
	iters, warm := e.Iters(8, counts{200000, 10000, 0, 0})
	// Only rank 1 writes pong, and not before rank 0 has pinged: both
	// ranks read the same base.
	base := w.pong.Load()
	var start time.Time
	deadline := time.Now().Add(time.Minute)
	for i := uint64(1); i <= uint64(iters+warm); i++ {
		if i == uint64(warm)+1 {
			start = time.Now()
		}
		v := base + i
		if e.Rank == 0 {
			w.ping.Store(v)
			for n := 0; w.pong.Load() != v; n++ {
				if n&(1<<20-1) == 0 && time.Now().After(deadline) {
					return fmt.Errorf("floor: peer stopped answering")
				}
			}
		} else {
			for n := 0; w.ping.Load() != v; n++ {
				if n&(1<<20-1) == 0 && time.Now().After(deadline) {
					return fmt.Errorf("floor: peer stopped answering")
				}
			}
			w.pong.Store(v)
		}
	}
	e.Row(8, us(time.Since(start))/float64(2*iters))
	return e.Barrier2()
}
