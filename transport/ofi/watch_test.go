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
// it again. A watcher tick that runs while the context arms its doorbell
// and polls may find the doorbell armed, or the context not polling, and
// return to its fastest tick itself, with no kick to send: such a round
// shows nothing about the kick and is run again.
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
			const rounds, tries = 3, 100
			done := 0
			for round := 0; done < rounds; round++ {
				if round == tries {
					t.Fatalf("a watcher tick ran while the context armed its doorbell in %d of %d rounds", tries-done, tries)
				}
				bell.Disarm()
				deadline := time.Now().Add(20 * time.Second)
				for pace() < watchSlowest {
					pt.Progress()
					pt.Poll(&sink, 64)
					if time.Now().After(deadline) {
						t.Fatalf("round %d: the watcher did not slow down to %v while its context polled (%v)", round, watchSlowest, pace())
					}
				}
				ticks, kicks := ads[0].ticks.Load(), ads[0].kicks.Load()
				bell.Arm()
				pt.Progress()
				pt.Poll(&sink, 64)
				kicked := ads[0].kicks.Load() != kicks
				if !kicked && (ticks%2 == 1 || ads[0].ticks.Load() != ticks) {
					continue // a tick ran meanwhile: run the round again
				}
				if !kicked {
					t.Fatalf("round %d: the context's Poll after arming its doorbell did not kick the slow watcher", round)
				}
				done++
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
