package pages

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Mapped counts the pages of a fresh mapping that were touched, and only
// those.
func TestMapped(t *testing.T) {
	page := unix.Getpagesize()
	mem, err := unix.Mmap(-1, 0, 4*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	p := unsafe.Pointer(&mem[0])
	if in, all, err := Mapped(p, uintptr(len(mem))); err != nil || in != 0 || all != 4 {
		t.Fatalf("fresh mapping: %d of %d pages mapped (%v), want 0 of 4", in, all, err)
	}
	mem[0], mem[2*page+5] = 1, 1
	if in, all, err := Mapped(p, uintptr(len(mem))); err != nil || in != 2 || all != 4 {
		t.Fatalf("two pages written: %d of %d mapped (%v), want 2 of 4", in, all, err)
	}
	// A range that starts and ends inside pages counts the pages it
	// touches.
	if in, all, err := Mapped(unsafe.Pointer(&mem[page-1]), uintptr(page+2)); err != nil || in != 2 || all != 3 {
		t.Fatalf("bytes %d to %d: %d of %d pages mapped (%v), want 2 of 3", page-1, 2*page+1, in, all, err)
	}
}
