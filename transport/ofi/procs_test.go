//go:build ofi

package ofi

import (
	"os"
	"runtime"
	"testing"
	"time"
)

// TestProcsRaised: a process with one P (a rank bound to one core) gets a
// second once its adapters started, so that a long call into the provider
// keeps its P; the last adapter to close gives the 1 back. A GOMAXPROCS
// the environment set is left alone.
func TestProcsRaised(t *testing.T) {
	was := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(was) })
	env, envSet := os.LookupEnv("GOMAXPROCS")
	t.Cleanup(func() {
		if envSet {
			os.Setenv("GOMAXPROCS", env)
		} else {
			os.Unsetenv("GOMAXPROCS")
		}
	})
	os.Unsetenv("GOMAXPROCS")

	for _, prov := range providers() {
		t.Run(prov, func(t *testing.T) {
			runtime.GOMAXPROCS(1)
			ads, _ := newWorld(t, 2, Options{Provider: prov, Timeout: time.Minute})
			// On a host with fewer processors than the test's two ranks,
			// they wait for each other's processor: no second P.
			want := raisedProcs
			if ads[0].Oversubscribed() {
				want = 1
			}
			if got := runtime.GOMAXPROCS(0); got != want {
				t.Fatalf("GOMAXPROCS %d after Start, want %d", got, want)
			}
			ads[0].Close()
			if got := runtime.GOMAXPROCS(0); got != want {
				t.Fatalf("GOMAXPROCS %d with one adapter still open, want %d", got, want)
			}
			ads[1].Close()
			if got := runtime.GOMAXPROCS(0); got != 1 {
				t.Fatalf("GOMAXPROCS %d after the last Close, want 1", got)
			}

			// The environment's choice stands.
			os.Setenv("GOMAXPROCS", "1")
			defer os.Unsetenv("GOMAXPROCS")
			ads, _ = newWorld(t, 2, Options{Provider: prov, Timeout: time.Minute})
			if got := runtime.GOMAXPROCS(0); got != 1 {
				t.Fatalf("GOMAXPROCS %d after Start with GOMAXPROCS=1 in the environment, want 1", got)
			}
			ads[0].Close()
			ads[1].Close()

			// A program that runs with more keeps them.
			os.Unsetenv("GOMAXPROCS")
			runtime.GOMAXPROCS(3)
			ads, _ = newWorld(t, 2, Options{Provider: prov, Timeout: time.Minute})
			ads[0].Close()
			ads[1].Close()
			if got := runtime.GOMAXPROCS(0); got != 3 {
				t.Fatalf("GOMAXPROCS %d after a run that started with 3, want 3", got)
			}
		})
	}
}
