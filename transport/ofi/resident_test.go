//go:build ofi

package ofi

import (
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/amigo-hpc/amigo/transport"
)

// resident returns how many of the pages that b covers are mapped.
func resident(t *testing.T, b []byte) (in, all int) {
	t.Helper()
	page := uintptr(unix.Getpagesize())
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b))) &^ (page - 1)
	end := uintptr(unsafe.Pointer(unsafe.SliceData(b))) + uintptr(len(b))
	vec := make([]byte, (end-start+page-1)/page)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, start, end-start, uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	for _, v := range vec {
		if v&1 != 0 {
			in++
		}
	}
	return in, len(vec)
}

// A port's receive buffers and its links' rings are mapped when it opens,
// not page by page as the first messages pass through them.
func TestPortMemoryResident(t *testing.T) {
	for _, prov := range providers() {
		t.Run(prov, func(t *testing.T) {
			// Receive buffers of 4096 packets (32 MiB and more) cannot come
			// from pages an earlier test's heap already mapped.
			ads, _ := newWorld(t, 2, Options{Provider: prov, Timeout: time.Minute, RecvBuffers: 4096})
			defer ads[0].Close()
			defer ads[1].Close()
			pt, err := ads[0].Open(0, transport.NewDoorbell())
			if err != nil {
				t.Fatal(err)
			}
			p := pt.(*port)
			if len(p.rxMem) < 16<<20 {
				t.Fatalf("receive buffers of %d bytes: want at least 16 MiB", len(p.rxMem))
			}
			if _, err := p.Link(transport.Addr{Rank: 1}); err != nil {
				t.Fatal(err)
			}
			ol := p.outs[1]
			if ol == nil {
				t.Fatal("no outgoing link to rank 1 after Link")
			}
			for _, m := range []struct {
				name string
				b    []byte
			}{{"receive buffers", p.rxMem}, {"control buffers", p.ctrlMem}, {"link ring", ol.mem}} {
				if in, all := resident(t, m.b); in != all {
					t.Errorf("%s: %d of %d pages mapped", m.name, in, all)
				}
			}
			runtime.KeepAlive(p)
		})
	}
}
