package main

import (
	"strings"
	"testing"
)

// The report of a round that was not clean names, for each rank, the kinds
// of its operations that hung, before its output.
func TestRankTailNamesHangs(t *testing.T) {
	res := &Result{Hangs: 2, HangKinds: []string{"get:1", "receive large:1"}}
	got := rankTail(2, res, "soak: armed", "")
	if !strings.HasPrefix(got, "--- rank 2 hangs: get:1, receive large:1\n--- rank 2 stdout:\nsoak: armed") {
		t.Fatalf("tail of a rank with hangs:\n%s", got)
	}
	for _, r := range []*Result{nil, {}} {
		if got := rankTail(1, r, "out", "err"); strings.Contains(got, "hangs") || !strings.HasPrefix(got, "--- rank 1 stdout:\nout") {
			t.Fatalf("tail of a rank without hangs:\n%s", got)
		}
	}
}

// A receive that hangs is named by its sender, sequence number and size,
// and a rank's last multicasts as origin come with the report.
func TestRankTailNamesOpenReceives(t *testing.T) {
	var r rank
	a := header{kind: kMcast, src: 0, seq: 57, n: 1 << 20}
	b := header{kind: kMcast, src: 1, seq: 9, n: 70000}
	c := header{kind: kLarge, src: 1, seq: 9, n: 300000}
	r.receiving(a, true)
	r.receiving(b, true)
	r.receiving(c, true)
	r.receiving(a, false)
	if got, want := r.openNames(kMcast), "rank 1 #9, 70000 B"; got != want {
		t.Fatalf("open multicast receives %q, want %q", got, want)
	}
	if got, want := r.openNames(kLarge), "rank 1 #9, 300000 B"; got != want {
		t.Fatalf("open large receives %q, want %q", got, want)
	}
	res := &Result{Hangs: 1, HangKinds: []string{"receive mcast:1 (rank 1 #9, 70000 B)"}, Mcasts: []string{"#4 (1000 B, forward) to [1 2]: ok"}}
	got := rankTail(3, res, "", "")
	if !strings.HasPrefix(got, "--- rank 3 hangs: receive mcast:1 (rank 1 #9, 70000 B)\n--- rank 3 multicasts as origin, the last: #4 (1000 B, forward) to [1 2]: ok\n") {
		t.Fatalf("tail:\n%s", got)
	}
}
