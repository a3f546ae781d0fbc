//go:build linux && amd64 && cgo

package cstack_test

import (
	"bytes"
	"runtime"
	"runtime/pprof"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/amigo-hpc/amigo/internal/cstack"
	"github.com/amigo-hpc/amigo/internal/cstack/cstacktest"
)

// arg is an int64 the garbage collector does not move (heap memory, kept
// alive by the caller until the call returns).
func call(s *cstack.Stack, fn uintptr, v *int64) int64 {
	r := int64(s.Call(fn, uintptr(unsafe.Pointer(v))))
	runtime.KeepAlive(v)
	return r
}

func newStack(t testing.TB) *cstack.Stack {
	s, err := cstack.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Free() })
	return s
}

func TestCallPassesArgumentAndResult(t *testing.T) {
	s := newStack(t)
	v := new(int64)
	for i := int64(-3); i < 1000; i++ {
		*v = i
		if got := call(s, cstacktest.Add1, v); got != i+1 {
			t.Fatalf("add1(%d) = %d", i, got)
		}
	}
}

func TestCallAlignsStack(t *testing.T) {
	s := newStack(t)
	v := new(int64)
	if got := call(s, cstacktest.Align, v); got != 0 {
		t.Fatalf("a 16-byte aligned local of the C function is %d bytes off: the stack came misaligned", got)
	}
}

// TestCallDeepStack runs a function that uses 200 KiB of the stack: it
// must not touch the goroutine's own stack (a few KiB) nor fault.
func TestCallDeepStack(t *testing.T) {
	s := newStack(t)
	v := new(int64)
	*v = 200 << 10
	var want int64
	for i := int64(0); i < *v; i++ {
		want += i & 255
	}
	if got := call(s, cstacktest.Deep, v); got != want {
		t.Fatalf("deep = %d, want %d", got, want)
	}
}

// TestCallsUnderCollectionPreemptionAndProfile keeps goroutines calling C
// on stacks of their own (each spinning some microseconds there) while
// others allocate and collect, the runtime asks goroutines to stop for
// its collections (preemption signals that land in C), and a CPU profile
// samples (profiling signals that land in C). Every call must return
// what it computed, the Go values around the calls must survive, and the
// profile must be complete.
func TestCallsUnderCollectionPreemptionAndProfile(t *testing.T) {
	var prof bytes.Buffer
	if err := pprof.StartCPUProfile(&prof); err != nil {
		t.Fatal(err)
	}
	const callers, calls, collections = 2, 2000, 3
	gcs := numGC()
	// The collections run while every caller calls C: the callers stop
	// only after the last one (and after calls calls each).
	gcDone := make(chan struct{})
	go func() {
		defer close(gcDone)
		var keep [][]byte
		for range collections {
			for range 64 {
				keep = append(keep, make([]byte, 64<<10))
			}
			keep = keep[:0]
			runtime.GC()
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan string, callers)
	deadline := time.Now().Add(time.Minute)
	for c := 0; c < callers; c++ {
		s := newStack(t)
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			v := new(int64)
			local := make([]int64, 64) // Go values live across the calls
			for i := range local {
				local[i] = int64(c*1000 + i)
			}
			for i := 0; ; i++ {
				*v = int64(5000 + i%500)
				if got := call(s, cstacktest.Spin, v); got != *v {
					errs <- "spin returned a wrong count"
					return
				}
				if local[i%64] != int64(c*1000+i%64) {
					errs <- "a Go value changed across a call"
					return
				}
				if i < calls {
					continue
				}
				select {
				case <-gcDone:
					return
				default:
				}
				if i%1024 == 0 && time.Now().After(deadline) {
					errs <- "the collections did not finish in a minute"
					return
				}
			}
		}(c)
	}
	wg.Wait()
	during := numGC() - gcs
	pprof.StopCPUProfile()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if during < collections {
		t.Errorf("%d collections while the goroutines called C, want %d", during, collections)
	}
	if prof.Len() == 0 {
		t.Error("empty CPU profile")
	}
}

func TestNewStacksAreDistinct(t *testing.T) {
	a, b := newStack(t), newStack(t)
	if a == b {
		t.Fatal("one stack twice")
	}
	if err := a.Free(); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(); err != nil {
		t.Fatalf("second Free: %v", err)
	}
}

func BenchmarkCall(b *testing.B) {
	s := newStack(b)
	v := new(int64)
	for i := 0; i < b.N; i++ {
		*v = int64(i)
		call(s, cstacktest.Add1, v)
	}
}

func numGC() uint32 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.NumGC
}
