package amigo_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/internal/launch"
)

func init() {
	rankPrograms["mcast-origin-dies"] = mcastOriginDiesRank
}

// mcastGateEnv names the directory through which the ranks of
// TestMulticastOriginDiesBeforeForward order their steps without amigo.
const mcastGateEnv = "AMIGO_TEST_GATE"

// Dispatch ids of the program.
const (
	moData  amigo.Dispatch = 1 // the multicast
	moReady amigo.Dispatch = 3 // a rank is connected
	moFwd   amigo.Dispatch = 5 // rank 1 forwarded the request
	moBye   amigo.Dispatch = 4 // rank 2 is done
	moPing  amigo.Dispatch = 6 // anything, to a peer
)

// mcastOriginDiesRank is a rank of TestMulticastOriginDiesBeforeForward:
// rank 0 (the origin) multicasts to ranks 1 and 2 by store and forward,
// and dies (SIGKILL) once rank 1 has its request; rank 1 holds the request (Defer)
// until rank 2 has failed rank 0, and only then accepts it, which
// forwards it to rank 2.
func mcastOriginDiesRank() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gate := os.Getenv(mcastGateEnv)
	cl, err := amigo.Open(ctx, amigo.Config{})
	if err != nil {
		return err
	}
	defer cl.Close()
	c := cl.Context(0)
	me := cl.Rank()
	origin := amigo.EndpointOf(0)
	ready, forwarded, bye, recvDone := 0, false, false, false
	var recvErr error
	var deferred *amigo.Deferred
	handled := 0
	buf := make([]byte, 1<<20)
	c.SetDispatch(moData, func(c *amigo.Context, m *amigo.Message) {
		handled++
		if me == 1 {
			// Hold the request: its Accept forwards it.
			d, err := m.Defer()
			if err != nil {
				recvErr, recvDone = err, true
				return
			}
			deferred = &d
			return
		}
		if err := m.Receive(buf, func(err error) { recvErr, recvDone = err, true }); err != nil {
			recvErr, recvDone = err, true
		}
	})
	c.SetDispatch(moReady, func(c *amigo.Context, m *amigo.Message) { ready++ })
	c.SetDispatch(moFwd, func(c *amigo.Context, m *amigo.Message) { forwarded = true })
	c.SetDispatch(moBye, func(c *amigo.Context, m *amigo.Message) { bye = true })
	c.SetDispatch(moPing, func(c *amigo.Context, m *amigo.Message) {})
	// send posts a message and waits until it is delivered.
	send := func(to int, d amigo.Dispatch) error {
		var sent error
		done := false
		if err := c.Send(amigo.EndpointOf(to), d, nil, nil, func(err error) { sent, done = err, true }); err != nil {
			return err
		}
		if err := c.Wait(ctx, func() bool { return done }); err != nil {
			return err
		}
		return sent
	}
	switch me {
	case 0:
		if err := c.Wait(ctx, func() bool { return ready == 2 }); err != nil {
			return err
		}
		if err := c.MulticastWith(&amigo.MulticastParams{Targets: []amigo.Endpoint{amigo.EndpointOf(1), amigo.EndpointOf(2)},
			Dispatch: moData, Data: make([]byte, len(buf)), Way: amigo.MulticastStoreForward}); err != nil {
			return err
		}
		// Advance (send the request) until rank 1 has it; then die.
		has := filepath.Join(gate, "rank1-has-request")
		if err := c.Wait(ctx, func() bool { _, err := os.Stat(has); return err == nil }); err != nil {
			return fmt.Errorf("rank 0: %w", err)
		}
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	case 1:
		if err := send(0, moReady); err != nil {
			return err
		}
		if err := send(2, moReady); err != nil {
			return err
		}
		// The request, held. The Advance that took it looked for failed
		// peers before it polled, and the origin lives until it hears
		// that this rank has its request: the origin is not failed here.
		if err := c.Wait(ctx, func() bool { return handled == 1 }); err != nil {
			return fmt.Errorf("rank 1: no multicast request: %w", err)
		}
		if deferred == nil {
			return fmt.Errorf("rank 1: defer: %w", recvErr)
		}
		if err := os.WriteFile(filepath.Join(gate, "rank1-has-request"), nil, 0o600); err != nil {
			return err
		}
		// Advance nothing until rank 2 failed the origin.
		if err := waitFile(ctx, filepath.Join(gate, "origin-failed")); err != nil {
			return fmt.Errorf("rank 1: %w", err)
		}
		// The next Advance executes the Accept before it looks at its
		// peers: the request goes on to rank 2, then this message.
		if err := c.Accept(*deferred, buf, func(err error) { recvErr, recvDone = err, true }); err != nil {
			return err
		}
		if err := send(2, moFwd); err != nil {
			return err
		}
		if err := c.Wait(ctx, func() bool { return recvDone }); err != nil {
			return fmt.Errorf("rank 1: receive neither completed nor failed: %w", err)
		}
		fmt.Printf("rank 1: outcome %v\n", recvErr)
		return c.Wait(ctx, func() bool { return bye })
	default:
		if err := send(0, moReady); err != nil {
			return err
		}
		if err := c.Wait(ctx, func() bool { return ready == 1 }); err != nil {
			return err
		}
		// Fail the origin here: notice its death, then give the context
		// something with it, so that the context fails it as a peer.
		if err := c.Wait(ctx, func() bool { return c.PeerErr(origin) != nil }); err != nil {
			return fmt.Errorf("rank 2: origin not seen to die: %w", err)
		}
		pinged := false
		if err := c.SendWith(&amigo.SendParams{Dest: origin, Dispatch: moPing, RemoteDone: func(error) { pinged = true }}); err != nil {
			pinged = true
		}
		if err := c.Wait(ctx, func() bool { return pinged && c.Stats().PeerFailures == 1 }); err != nil {
			return fmt.Errorf("rank 2: origin not failed (%d peer failures): %w", c.Stats().PeerFailures, err)
		}
		if err := os.WriteFile(filepath.Join(gate, "origin-failed"), nil, 0o600); err != nil {
			return err
		}
		if err := c.Wait(ctx, func() bool { return forwarded }); err != nil {
			return fmt.Errorf("rank 2: rank 1 did not forward: %w", err)
		}
		if handled > 0 {
			// A request from a failed origin taken in: its receive must
			// end, and soon.
			bounded, cancelBounded := context.WithTimeout(ctx, 10*time.Second)
			err := c.Wait(bounded, func() bool { return recvDone })
			cancelBounded()
			if err != nil {
				return fmt.Errorf("rank 2: the receive of a multicast whose origin had failed neither completed nor failed: %w", err)
			}
			fmt.Printf("rank 2: outcome %v\n", recvErr)
		}
		fmt.Printf("rank 2: handled %d, dropped %d\n", handled, c.Stats().MulticastsDropped)
		return send(1, moBye)
	}
}

// waitFile waits, without advancing anything, until path exists.
func waitFile(ctx context.Context, path string) error {
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", filepath.Base(path), ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

var moOutcome = regexp.MustCompile(`(?m)^rank 1: outcome (.*)$`)

// A multicast whose origin died after its request left for the first
// target, which forwards it only after the second target failed the
// origin (the soak's ranks, starved of a processor, did that): the second
// target drops the request of the dead origin rather than wait for ever
// for data or a call-off that cannot come; the first target's receive
// fails naming the origin. Over shared memory and TCP, the origin killed
// (SIGKILL) at the exact point.
func TestMulticastOriginDiesBeforeForward(t *testing.T) {
	for _, over := range []string{"shm", "tcp"} {
		t.Run(over, func(t *testing.T) {
			out := launch.NewCapture(3)
			job, err := launch.Start(launch.Options{
				N:    3,
				Argv: []string{os.Args[0]},
				Env: []string{rankEnv + "=mcast-origin-dies", "AMIGO_TRANSPORT=" + over, mcastGateEnv + "=" + t.TempDir(),
					"GORACE=atexit_sleep_ms=0"},
				KeepGoing: true,
				Output:    out.Output,
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			err = job.Wait(ctx)
			all := out.All()
			var ee *launch.ExitErrors
			if !errors.As(err, &ee) || len(ee.Ranks) != 1 || ee.Ranks[0] != 0 {
				t.Fatalf("want only rank 0 to fail (killed), got %v\n%s", err, all)
			}
			if !strings.Contains(all, "rank 2: handled 0, dropped 1\n") {
				t.Fatalf("rank 2 should drop the request of the failed origin unseen:\n%s", all)
			}
			m := moOutcome.FindStringSubmatch(all)
			if m == nil || !strings.Contains(m[1], "rank 0") {
				t.Fatalf("rank 1's receive should fail naming rank 0:\n%s", all)
			}
		})
	}
}
