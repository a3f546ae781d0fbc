//go:build ofi

package ofi

import (
	"bytes"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/internal/fifo"
	"github.com/amigo-hpc/amigo/transport"
)

// With local registration (FI_MR_LOCAL, forced by RegisterLocal), a GET or
// PUT buffer used again is registered once: 200 GETs and PUTs through
// slices of one buffer make one registration; 100 distinct buffers make
// 100, of which at most regCacheEntries stay registered; the data is right
// every time, and Close leaves none.
func TestRegCache(t *testing.T) {
	for _, prov := range providers() {
		t.Run(prov, func(t *testing.T) {
			ads, regs := newWorld(t, 2, Options{Provider: prov, RegisterLocal: true, Timeout: time.Minute})
			defer ads[0].Close()
			defer ads[1].Close()
			mem := make([]byte, 4096)
			for i := range mem {
				mem[i] = byte(i * 7)
			}
			key, err := regs[1].Register(mem)
			if err != nil {
				t.Fatal(err)
			}
			dst, _ := ads[1].Open(0, transport.NewDoorbell())
			srcPort, _ := ads[0].Open(0, transport.NewDoorbell())
			l, err := srcPort.Link(transport.Addr{Rank: 1})
			if err != nil {
				t.Fatal(err)
			}
			src := srcPort.(*port)
			rdma := fifo.New(l.RDMA.Slots(), l.RDMA.HeadCounter(), l.RDMA.TransferCounter(), l.RDMA.Status)
			op := func(kind transport.RDMAKind, buf []byte, off uint64) {
				t.Helper()
				var err error
				done := false
				d := l.RDMA.Slot(rdma.Tail())
				d.Kind, d.Local, d.Key, d.Off = kind, buf, key, off
				rdma.Inject(1, fifo.Func(func(e error) { err, done = e, true }))
				l.RDMA.Publish(rdma.Tail())
				deadline := time.Now().Add(time.Minute)
				for !done {
					src.Progress()
					src.Poll(&cnt{}, 8)
					dst.Progress()
					dst.Poll(&cnt{}, 8)
					rdma.Complete()
					if time.Now().After(deadline) {
						t.Fatal("operation neither completed nor failed in a minute")
					}
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			buf := make([]byte, 1024)
			for i := 0; i < 100; i++ {
				off := uint64(i % 8 * 256)
				b := buf[i%4*64 : i%4*64+512]
				op(transport.Get, b, off)
				if !bytes.Equal(b, mem[off:off+512]) {
					t.Fatalf("GET %d read the wrong bytes", i)
				}
				for j := range b[:16] {
					b[j] = byte(i + j)
				}
				op(transport.Put, b[:16], 3000)
				if !bytes.Equal(mem[3000:3016], b[:16]) {
					t.Fatalf("PUT %d wrote the wrong bytes", i)
				}
			}
			if n := src.regs.registrations; n != 1 {
				t.Fatalf("one buffer used 200 times: %d registrations, want 1", n)
			}
			for i := 0; i < 100; i++ {
				b := make([]byte, 64)
				op(transport.Get, b, uint64(i))
				if !bytes.Equal(b, mem[i:i+64]) {
					t.Fatalf("GET into buffer %d read the wrong bytes", i)
				}
			}
			if n := src.regs.registrations; n != 101 {
				t.Fatalf("100 buffers more: %d registrations, want 101", n)
			}
			if n := len(src.regs.entries); n > regCacheEntries {
				t.Fatalf("%d registrations kept, want at most %d", n, regCacheEntries)
			}
			for _, e := range src.regs.entries {
				if e.refs != 0 {
					t.Fatalf("an entry is still held by %d operations after all completed", e.refs)
				}
			}
			// The endpoint, and the registrations with it, go when the
			// adapter closes (the last of the process: an endpoint
			// another adapter here may still send to is kept until then).
			if err := ads[0].Close(); err != nil {
				t.Fatal(err)
			}
			if err := ads[1].Close(); err != nil {
				t.Fatal(err)
			}
			if n := len(src.regs.entries); n != 0 {
				t.Fatalf("%d registrations left after Close", n)
			}
		})
	}
}
