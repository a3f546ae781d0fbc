//go:build ofi

package amigo_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
)

func init() { rankPrograms["ofi-close"] = ofiCloseProgram }

// ofiCloseProgram exchanges 20 messages with the other rank, passes a
// barrier and closes at once.
func ofiCloseProgram() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := amigo.Open(ctx, amigo.Config{})
	if err != nil {
		return err
	}
	defer cl.Close()
	c := cl.Context(0)
	// Sizes around the provider's eager limit and the ring's largest
	// packet, which the adapter must deliver whole whatever protocol
	// carries them.
	sizes := []int{1, 8000, 20000, 30000, 33000, 70000}
	arrived, got := 0, 0
	var bad error
	c.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
		i := arrived // handlers run in the order of the sends
		arrived++
		buf := make([]byte, m.Size())
		check := func(err error) {
			want := sizes[i%len(sizes)]
			if err == nil && (len(buf) != want || buf[len(buf)-1] != byte(i)) {
				err = fmt.Errorf("message %d: %d bytes ending in %d, want %d ending in %d", i, len(buf), buf[len(buf)-1], want, byte(i))
			}
			if err != nil && bad == nil {
				bad = err
			}
			got++
		}
		if m.Inline() {
			copy(buf, m.Data)
			check(nil)
			return
		}
		if err := m.Receive(buf, check); err != nil && bad == nil {
			bad = err
		}
	})
	if err := cl.Barrier(ctx); err != nil {
		return fmt.Errorf("first barrier: %w", err)
	}
	k := amigo.NewCounter()
	for i := 0; i < 20; i++ {
		b := make([]byte, sizes[i%len(sizes)])
		b[len(b)-1] = byte(i)
		k.Add(1)
		if err := c.Send(amigo.EndpointOf(1-cl.Rank()), 1, nil, b, k.Done()); err != nil {
			return err
		}
	}
	if err := c.Wait(ctx, func() bool { return got == 20 && k.Pending() == 0 || bad != nil }); err != nil {
		return fmt.Errorf("received %d of 20: %w", got, err)
	}
	if bad != nil {
		return bad
	}
	if err := cl.Barrier(ctx); err != nil {
		return fmt.Errorf("last barrier: %w", err)
	}
	fmt.Printf("rank %d: closed cleanly\n", cl.Rank())
	return nil
}

// Two processes that exchange messages of sizes around the providers'
// limits, pass a last barrier and close at once, 20 times over each
// provider: every message arrives whole, and the barrier never fails on the rank that
// leaves it last, and nothing is logged as a failure. (That rank's last
// message was taken by a peer that closed right after: the peer's
// acknowledgement leaves before its goodbye, and what was acknowledged
// counts delivered even if the provider has not yet reported the send
// complete.)
func TestOFICloseAfterBarrier(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "amirun")
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if out, err := exec.Command(gobin, "build", "-o", bin, "github.com/amigo-hpc/amigo/cmd/amirun").CombinedOutput(); err != nil {
		t.Fatalf("building amirun: %v\n%s", err, out)
	}
	for _, prov := range []string{"tcp;ofi_rxm", "shm"} {
		t.Run(prov, func(t *testing.T) {
			for round := 0; round < 20; round++ {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				cmd := exec.CommandContext(ctx, bin, "-n", "2", "--timeout", "90s", os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), rankEnv+"=ofi-close", "AMIGO_TRANSPORT=ofi", "AMIGO_OFI_PROVIDER="+prov, "IPATH_NO_BACKTRACE=1", "GORACE=atexit_sleep_ms=0")
				out, err := cmd.CombinedOutput()
				cancel()
				if err != nil || strings.Count(string(out), "closed cleanly") != 2 {
					t.Fatalf("round %d: %v\n%s", round, err, out)
				}
				if strings.Contains(string(out), "failed") {
					t.Fatalf("round %d: a clean close logged a failure:\n%s", round, out)
				}
			}
		})
	}
}
