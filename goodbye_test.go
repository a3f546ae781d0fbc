package amigo_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/internal/launch"
)

func init() {
	rankPrograms["goodbye"] = goodbyeProgram
}

const (
	goodbyeSmall = 64      // inline messages to each peer
	goodbyeLarge = 1 << 18 // bytes of one large message to each peer
)

// goodbyeProgram is a rank of a job that opens, sends every peer small
// messages and a large one, waits until it got everyone's and its own
// sends completed, tells every peer it is done and closes once they all
// said so, as a finalize does: the ranks close one after another while
// the last messages, acknowledgements and goodbyes cross.
func goodbyeProgram() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	small, large, finished := 0, 0, 0
	var recvErr error
	cl, err := amigo.Open(ctx, amigo.Config{Handlers: map[amigo.Dispatch]amigo.Handler{
		2: func(c *amigo.Context, m *amigo.Message) { finished++ },
		1: func(c *amigo.Context, m *amigo.Message) {
			if m.Inline() {
				small++
				return
			}
			// A buffer of its own: the peers' data land at once.
			if err := m.Receive(make([]byte, m.Size()), func(err error) {
				large++
				recvErr = errors.Join(recvErr, err)
			}); err != nil {
				recvErr = errors.Join(recvErr, err)
			}
		},
	}})
	if err != nil {
		return err
	}
	c := cl.Context(0)
	n, me := cl.Size(), cl.Rank()
	data := make([]byte, goodbyeLarge)
	k := amigo.NewCounter()
	smallFail, largeFail := 0, 0
	for i := 0; i < goodbyeSmall; i++ {
		for p := 0; p < n; p++ {
			if p != me {
				k.Add(1)
				kd := k.Done()
				if err := c.Send(amigo.EndpointOf(p), 1, nil, []byte("small"), func(err error) {
					if err != nil {
						smallFail++
					}
					kd(err)
				}); err != nil {
					return err
				}
			}
		}
	}
	for p := 0; p < n; p++ {
		if p != me {
			k.Add(1)
			kd := k.Done()
			if err := c.SendWith(&amigo.SendParams{Dest: amigo.EndpointOf(p), Dispatch: 1, Data: data, RemoteDone: func(err error) {
				if err != nil {
					largeFail++
				}
				kd(err)
			}}); err != nil {
				return err
			}
		}
	}
	if err := c.WaitCounter(ctx, k); err != nil {
		return fmt.Errorf("rank %d: sends: %w (small failed %d, large failed %d) %+v", me, err, smallFail, largeFail, c.Stats())
	}
	if err := c.Wait(ctx, func() bool { return small == goodbyeSmall*(n-1) && large == n-1 }); err != nil {
		return fmt.Errorf("rank %d: got %d small, %d large: %w", me, small, large, err)
	}
	if recvErr != nil {
		return recvErr
	}
	// A finalize: every rank tells every other it is done, and closes
	// once all said so; the last of these messages, their transport
	// acknowledgements and the goodbyes cross while ranks close.
	for p := 0; p < n; p++ {
		if p != me {
			if err := c.SendImmediate(amigo.EndpointOf(p), 2, nil, nil); err != nil {
				return err
			}
		}
	}
	if err := c.Wait(ctx, func() bool { return finished == n-1 }); err != nil {
		return fmt.Errorf("rank %d: finalize: %w", me, err)
	}
	return cl.Close()
}

// A successful job over TCP closes quietly: run after run, no rank logs a
// connection failure or a peer failure (AMIGO_LOG=info) when the ranks
// close one after another.
func TestQuietCloseTCP(t *testing.T) {
	rounds := 50
	if testing.Short() {
		rounds = 10
	}
	const ranks = 4
	for round := 0; round < rounds; round++ {
		out := launch.NewCapture(ranks)
		job, err := launch.Start(launch.Options{
			N:    ranks,
			Argv: []string{os.Args[0]},
			Env: []string{rankEnv + "=goodbye", "AMIGO_TRANSPORT=tcp", amigo.LogEnv + "=info",
				"GORACE=atexit_sleep_ms=0"},
			Output: out.Output,
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		err = job.Wait(ctx)
		cancel()
		if err != nil {
			t.Fatalf("round %d: %v\n%s", round, err, out.All())
		}
		for r := 0; r < ranks; r++ {
			for _, line := range strings.Split(out.Rank(r), "\n") {
				if line == "" || strings.Contains(line, "msg=\"client open\"") {
					continue
				}
				t.Fatalf("round %d: rank %d logged %q; all output:\n%s", round, r, line, out.All())
			}
		}
	}
}
