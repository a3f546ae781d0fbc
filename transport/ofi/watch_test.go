//go:build ofi

package ofi

import (
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/transport"
)

// The adapter's watcher slows down while its context polls, and comes back
// to its fastest tick as soon as the context, whose doorbell belongs to
// another adapter, arms that doorbell to sleep and makes its last pass of
// the ports (Poll): the watcher is what rings such a doorbell when the
// endpoint has something, and a slow watcher would leave the sleeper
// asleep for up to watchSlowest. Three rounds: the watcher rings the
// doorbell (which disarms it) whenever it cannot tell that the endpoint has
// nothing (shm has no wait object), as a woken context then polls and arms
// it again.
func TestWatcherPace(t *testing.T) {
	for _, prov := range providers() {
		t.Run(prov, func(t *testing.T) {
			ads, _ := newWorld(t, 2, Options{Provider: prov, Timeout: time.Minute})
			t.Cleanup(func() { ads[0].Close(); ads[1].Close() })
			bell := transport.NewDoorbell() // another adapter's
			pt, err := ads[0].Open(0, bell)
			if err != nil {
				t.Fatal(err)
			}
			if pt.(*port).ownBell {
				t.Fatal("a doorbell the adapter did not make counted as its own")
			}
			pace := func() time.Duration { return time.Duration(ads[0].pace.Load()) }
			var sink cnt
			for round := 0; round < 3; round++ {
				bell.Disarm()
				deadline := time.Now().Add(20 * time.Second)
				for pace() < watchSlowest {
					pt.Progress()
					pt.Poll(&sink, 64)
					if time.Now().After(deadline) {
						t.Fatalf("round %d: the watcher did not slow down to %v while its context polled (%v)", round, watchSlowest, pace())
					}
				}
				kicks := ads[0].kicks.Load()
				bell.Arm()
				pt.Progress()
				pt.Poll(&sink, 64)
				if ads[0].kicks.Load() == kicks {
					t.Fatalf("round %d: the context's Poll after arming its doorbell did not kick the slow watcher", round)
				}
				for deadline = time.Now().Add(20 * time.Second); pace() != watchTick; {
					if time.Now().After(deadline) {
						t.Fatalf("round %d: the watcher stayed at %v after the context armed its doorbell to sleep", round, pace())
					}
					time.Sleep(50 * time.Microsecond)
				}
			}
			bell.Disarm()
		})
	}
}
