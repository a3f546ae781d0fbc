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
