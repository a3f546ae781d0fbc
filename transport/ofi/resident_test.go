//go:build ofi

package ofi

import (
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/amigo-hpc/amigo/internal/pages"
	"github.com/amigo-hpc/amigo/transport"
)

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
				in, all, err := pages.Mapped(unsafe.Pointer(unsafe.SliceData(m.b)), uintptr(len(m.b)))
				if err != nil {
					t.Fatal(err)
				}
				if in != all {
					t.Errorf("%s: %d of %d pages mapped", m.name, in, all)
				}
			}
			runtime.KeepAlive(p)
		})
	}
}
