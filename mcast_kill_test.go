package amigo_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/internal/launch"
)

const (
	killRanks  = 5
	killVictim = 2
	killSize   = 32 << 20
)

// mcastKillRank is the rank program of TestMulticastTargetKilled: rank 0
// multicasts to every other rank; rank killVictim kills itself (SIGKILL) as
// soon as it has forwarded some data; every other rank reports how its part
// ended, then waits for rank 0's goodbye.
func mcastKillRank(way string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := amigo.Open(ctx, amigo.Config{})
	if err != nil {
		return err
	}
	defer cl.Close()
	c := cl.Context(0)
	me, n := cl.Rank(), cl.Size()
	data := make([]byte, killSize)
	fastFill(data, 3)
	buf := make([]byte, killSize)
	got := false
	var recvErr error
	c.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
		if err := m.Receive(buf, func(err error) { recvErr, got = err, true }); err != nil {
			recvErr, got = err, true
		}
	})
	ready, bye := 0, false
	c.SetDispatch(3, func(c *amigo.Context, m *amigo.Message) { ready++ })
	c.SetDispatch(4, func(c *amigo.Context, m *amigo.Message) { bye = true })
	if me != 0 {
		if err := c.SendImmediate(amigo.EndpointOf(0), 3, nil, nil); err != nil {
			return err
		}
	} else if err := c.Wait(ctx, func() bool { return ready == n-1 }); err != nil {
		return err
	}
	switch {
	case me == 0:
		var targets []amigo.Endpoint
		for r := 1; r < n; r++ {
			targets = append(targets, amigo.EndpointOf(r))
		}
		w := amigo.MulticastForward
		if way == "store-forward" {
			w = amigo.MulticastStoreForward
		}
		sent, done := error(nil), false
		if err := c.MulticastWith(&amigo.MulticastParams{Targets: targets, Dispatch: 1, Data: data, Way: w,
			Sent: func(err error) { sent, done = err, true }}); err != nil {
			return err
		}
		if err := c.Wait(ctx, func() bool { return done }); err != nil {
			return fmt.Errorf("rank 0: no sent callback: %w", err)
		}
		fmt.Printf("rank 0: sent: %v\n", sent)
		k := amigo.NewCounter()
		for _, t := range targets {
			if t.Rank == killVictim {
				continue
			}
			k.Add(1)
			if err := c.Send(t, 4, nil, nil, k.Done()); err != nil {
				return err
			}
		}
		return c.WaitCounter(ctx, k)
	case me == killVictim:
		if err := c.Wait(ctx, func() bool { return c.Stats().MulticastBytesPut > 0 }); err != nil {
			return err
		}
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	default:
		if err := c.Wait(ctx, func() bool { return got }); err != nil {
			return fmt.Errorf("rank %d: no receive callback: %w", me, err)
		}
		switch {
		case recvErr != nil:
			var pe *amigo.PeerError
			if errors.As(recvErr, &pe) {
				fmt.Printf("rank %d: names rank %d\n", me, pe.Addr.Rank)
			}
			fmt.Printf("rank %d: outcome error: %v\n", me, recvErr)
		case !bytes.Equal(buf, data):
			fmt.Printf("rank %d: outcome wrong data\n", me)
		default:
			fmt.Printf("rank %d: outcome ok\n", me)
		}
		return c.Wait(ctx, func() bool { return bye })
	}
}

var killOutcome = regexp.MustCompile(`(?m)^rank (\d+): outcome (ok|error: .*|wrong data)$`)

// A target killed (SIGKILL, its process gone) in the middle of a multicast
// between processes over shared memory: the origin's sent callback fails
// with an error naming it, the targets after it in the chain fail with such
// an error, no target completes with wrong data, and nothing hangs.
func TestMulticastTargetKilled(t *testing.T) {
	for _, way := range []string{"forward", "store-forward"} {
		t.Run(way, func(t *testing.T) {
			out := launch.NewCapture(killRanks)
			job, err := launch.Start(launch.Options{
				N:         killRanks,
				Argv:      []string{os.Args[0]},
				Env:       []string{rankEnv + "=mcastkill:" + way, "AMIGO_TRANSPORT=shm", "GORACE=atexit_sleep_ms=0"},
				KeepGoing: true,
				Output:    out.Output,
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			start := time.Now()
			err = job.Wait(ctx)
			elapsed := time.Since(start)
			all := out.All()
			var ee *launch.ExitErrors
			if !errors.As(err, &ee) || len(ee.Ranks) != 1 || ee.Ranks[0] != killVictim {
				t.Fatalf("want only rank %d to fail (killed), got %v\n%s", killVictim, err, all)
			}
			sent := regexp.MustCompile(`(?m)^rank 0: sent: (.*)$`).FindStringSubmatch(all)
			if sent == nil || !strings.Contains(sent[1], fmt.Sprintf("rank %d", killVictim)) {
				t.Fatalf("origin's sent callback should fail naming rank %d:\n%s", killVictim, all)
			}
			seen := map[string]string{}
			for _, m := range killOutcome.FindAllStringSubmatch(all, -1) {
				seen[m[1]] = m[2]
			}
			for r := 1; r < killRanks; r++ {
				if r == killVictim {
					continue
				}
				o, ok := seen[fmt.Sprint(r)]
				switch {
				case !ok:
					t.Errorf("rank %d reported no outcome", r)
				case o == "wrong data":
					t.Errorf("rank %d completed with wrong data", r)
				case strings.HasPrefix(o, "error") && !strings.Contains(o, fmt.Sprintf("rank %d", killVictim)):
					t.Errorf("rank %d: error does not name rank %d: %s", r, killVictim, o)
				case strings.HasPrefix(o, "error") && !strings.Contains(all, fmt.Sprintf("rank %d: names rank %d\n", r, killVictim)):
					t.Errorf("rank %d: errors.As finds no *PeerError naming rank %d in: %s", r, killVictim, o)
				case r > killVictim && o == "ok":
					t.Errorf("rank %d, after the killed rank in the chain, completed ok", r)
				}
			}
			t.Logf("job with a killed target over in %v:\n%s", elapsed.Round(time.Millisecond), all)
		})
	}
}
