package launch

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// The ranks of these tests are this test binary again: started as a rank,
// it prints its Cpus_allowed_list from /proc/self/status and exits.
func TestMain(m *testing.M) {
	if InRank() {
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
				fmt.Print(strings.TrimSpace(v))
			}
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func cpusOfRanks(t *testing.T, n int, bind bool) []string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := NewCapture(n)
	j, err := Start(Options{N: n, Argv: []string{self}, Output: c.Output, BindCores: bind})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := j.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	out := make([]string, n)
	for r := range n {
		out[r] = c.Rank(r)
	}
	return out
}

// TestBindCores: with BindCores rank r runs on the processors of the r-th
// core only; with more ranks than cores, or without it, on all of this
// process's.
func TestBindCores(t *testing.T) {
	cs, err := Cores()
	if err != nil {
		t.Fatal(err)
	}
	var all []int
	for _, c := range cs {
		all = append(all, c...)
	}
	n := min(len(cs), 4)
	for r, got := range cpusOfRanks(t, n, true) {
		if want := CPUList(cs[r]); got != want {
			t.Errorf("bound rank %d runs on %q, want %q", r, got, want)
		}
	}
	for r, got := range cpusOfRanks(t, len(cs)+1, true) {
		if want := CPUList(sortedInts(all)); got != want {
			t.Errorf("rank %d of more ranks than cores runs on %q, want %q", r, got, want)
		}
	}
	for r, got := range cpusOfRanks(t, 2, false) {
		if want := CPUList(sortedInts(all)); got != want {
			t.Errorf("unbound rank %d runs on %q, want %q", r, got, want)
		}
	}
	if got := CPUList([]int{0, 1, 2, 5, 7, 8}); got != "0-2,5,7-8" {
		t.Errorf("CPUList = %q", got)
	}
}

func sortedInts(a []int) []int {
	b := slices.Clone(a)
	slices.Sort(b)
	return b
}
