package main

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortsDistinct takes a round's ports from a span of four: each is
// one nobody listens on, and no two ranks get the same one (a rank that
// found its port taken by another failed to start, and its round with it).
func TestFreePortsDistinct(t *testing.T) {
	// A span of four ports nobody listens on, below the kernel's range.
	const span = 4
	var lo int
	for lo = 30000; lo > 20000; lo -= span {
		free := 0
		for p := lo - span; p < lo; p++ {
			if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
				l.Close()
				free++
			}
		}
		if free == span {
			break
		}
	}
	for round := range 20 {
		taken := map[int]bool{}
		seen := map[int]bool{}
		for r := range span {
			p, err := freePortBelow(lo, span, taken)
			if err != nil {
				t.Fatalf("round %d, rank %d: %v", round, r, err)
			}
			if p < lo-span || p >= lo || seen[p] {
				t.Fatalf("round %d: rank %d got port %d (span %d-%d, given before: %v)", round, r, p, lo-span, lo-1, seen)
			}
			seen[p] = true
		}
		if _, err := freePortBelow(lo, span, taken); err == nil {
			t.Fatalf("round %d: a fifth port out of a span of four", round)
		}
	}
}
