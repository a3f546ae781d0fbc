//go:build ofi

package ofi

import (
	"runtime"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

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

// touchPages maps every page a buffer reaches, wherever in a page it
// starts: a buffer from partway into one page to partway into the third
// spans three pages, though len(b)/4096 steps from its start reach two.
func TestTouchPagesEveryPage(t *testing.T) {
	for _, c := range []struct{ off, n int }{
		{4000, 5000}, {4095, 4098}, {1, 8191}, {0, 3 * 4096}, {0, 1}, {4095, 2}, {100, 4096}, {4096, 4097},
	} {
		mem, err := unix.Mmap(-1, 0, 4*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			t.Fatal(err)
		}
		b := mem[c.off : c.off+c.n]
		if in, _, err := pages.Mapped(unsafe.Pointer(&mem[0]), uintptr(len(mem))); err != nil || in != 0 {
			t.Fatalf("a fresh mapping has %d pages mapped (%v)", in, err)
		}
		touchPages(b)
		in, all, err := pages.Mapped(unsafe.Pointer(&b[0]), uintptr(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		if in != all {
			t.Errorf("%d bytes from offset %d: %d of the %d pages they span mapped", c.n, c.off, in, all)
		}
		for i, v := range mem {
			if v != 0 {
				t.Fatalf("byte %d of the mapping is %d after touchPages: want every byte left zero", i, v)
			}
		}
		if err := unix.Munmap(mem); err != nil {
			t.Fatal(err)
		}
	}
}
