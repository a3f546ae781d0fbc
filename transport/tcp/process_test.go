package tcp_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/internal/hostmesh"
	"github.com/amigo-hpc/amigo/internal/launch"
	"github.com/amigo-hpc/amigo/transport/tcp"
)

// The tests in this file run ranks as real processes: the test binary
// re-runs itself (the os/exec pattern) with rankEnv naming what the rank
// does, and internal/launch (or amirun, for the network-namespace test)
// serves them PMI as a launcher would.

const rankEnv = "AMIGO_TCP_TEST_RANK"

func TestMain(m *testing.M) {
	if mode := os.Getenv(rankEnv); mode != "" {
		os.Exit(rankMain(mode))
	}
	os.Exit(m.Run())
}

func rankMain(mode string) int {
	var err error
	switch {
	case mode == "killget":
		err = killGet()
	case mode == "over":
		err = oversubscribed()
	case mode == "halo":
		err = halo()
	case strings.HasPrefix(mode, "mesh:"):
		err = hostmesh.Rank(strings.TrimPrefix(mode, "mesh:"))
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rank:", err)
		return 1
	}
	return 0
}

// runJob runs n ranks of mode over TCP and returns their combined output.
func runJob(t *testing.T, n int, mode string, timeout time.Duration) (string, error) {
	t.Helper()
	out := launch.NewCapture(n)
	job, err := launch.Start(launch.Options{
		N:         n,
		Argv:      []string{os.Args[0]},
		Env:       []string{rankEnv + "=" + mode, "AMIGO_TRANSPORT=tcp", "GORACE=atexit_sleep_ms=0"},
		KeepGoing: true,
		Output:    out.Output,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err = job.Wait(ctx)
	return out.All(), err
}

const killGetSize = 128 << 20

// killGet: rank 1 registers a large region and kills itself (SIGKILL) once
// it has sent 8 MiB of rank 0's GET of it; rank 0 goes on exchanging with
// rank 2 throughout.
func killGet() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := amigo.Open(ctx, amigo.Config{})
	if err != nil {
		return err
	}
	defer cl.Close()
	c := cl.Context(0)
	switch cl.Rank() {
	case 1:
		reg, err := cl.RegisterMemory(make([]byte, killGetSize))
		if err != nil {
			return err
		}
		go func() {
			for tcp.ProcessStats().BytesSent < 8<<20 {
				time.Sleep(20 * time.Microsecond)
			}
			fmt.Printf("rank 1: killed at %d after %d bytes sent\n", time.Now().UnixNano(), tcp.ProcessStats().BytesSent)
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}()
		if err := c.SendImmediate(amigo.EndpointOf(0), 1, nil, binary.LittleEndian.AppendUint64(nil, uint64(reg.Key()))); err != nil {
			return err
		}
		c.Wait(ctx, func() bool { return false })
		return errors.New("rank 1 outlived its death")
	case 2:
		stop := false
		c.SetDispatch(2, func(c *amigo.Context, m *amigo.Message) { c.SendImmediate(m.Source, 3, m.Header, nil) })
		c.SetDispatch(4, func(c *amigo.Context, m *amigo.Message) { stop = true })
		if err := c.Wait(ctx, func() bool { return stop }); err != nil {
			return err
		}
		fmt.Println("rank 2: done")
		return nil
	}
	var key amigo.Key
	c.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) { key = amigo.Key(binary.LittleEndian.Uint64(m.Data)) })
	echoes := 0
	c.SetDispatch(3, func(c *amigo.Context, m *amigo.Message) { echoes++ })
	if err := c.Wait(ctx, func() bool { return key != 0 }); err != nil {
		return err
	}
	buf := make([]byte, killGetSize)
	var getErr error
	getDone := false
	var failedAt int64
	if err := c.Get(amigo.EndpointOf(1), buf, key, 0, func(err error) {
		getErr, getDone, failedAt = err, true, time.Now().UnixNano()
	}); err != nil {
		return err
	}
	pings, after := 0, 0
	for !getDone || after < 500 {
		want := echoes + 1
		if err := c.SendImmediate(amigo.EndpointOf(2), 2, nil, nil); err != nil {
			return err
		}
		if err := c.Wait(ctx, func() bool { return echoes == want }); err != nil {
			return fmt.Errorf("ping %d with rank 2 (GET done %v): %w", pings, getDone, err)
		}
		pings++
		if getDone {
			after++
		}
	}
	var pe *amigo.PeerError
	if getErr == nil || !errors.As(getErr, &pe) || pe.Addr.Rank != 1 {
		return fmt.Errorf("GET from the killed rank completed with %v", getErr)
	}
	fmt.Printf("rank 0: GET failed at %d: %v\n", failedAt, getErr)
	done := false
	if err := c.Send(amigo.EndpointOf(2), 4, nil, nil, func(error) { done = true }); err != nil {
		return err
	}
	if err := c.Wait(ctx, func() bool { return done }); err != nil {
		return err
	}
	fmt.Printf("rank 0: %d pings with rank 2, %d after the failure\n", pings, after)
	return nil
}

var (
	killedLine = regexp.MustCompile(`rank 1: killed at (\d+) after (\d+) bytes sent`)
	failedLine = regexp.MustCompile(`rank 0: GET failed at (\d+): (.*)`)
)

// A peer killed in the middle of a GET it serves: the GET completes with an
// error naming it, soon after; the other ranks go on exchanging, before and
// after, and finish normally.
func TestPeerKilledMidGet(t *testing.T) {
	out, err := runJob(t, 3, "killget", 2*time.Minute)
	var ee *launch.ExitErrors
	if !errors.As(err, &ee) || len(ee.Ranks) != 1 || ee.Ranks[0] != 1 || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("want only rank 1 killed, got %v\n%s", err, out)
	}
	k, f := killedLine.FindStringSubmatch(out), failedLine.FindStringSubmatch(out)
	if k == nil || f == nil || !strings.Contains(out, "rank 2: done") || !strings.Contains(out, "pings with rank 2") {
		t.Fatalf("output:\n%s", out)
	}
	sent, _ := strconv.ParseInt(k[2], 10, 64)
	if sent >= killGetSize {
		t.Fatalf("rank 1 sent %d bytes before dying: not mid-GET", sent)
	}
	killed, _ := strconv.ParseInt(k[1], 10, 64)
	failed, _ := strconv.ParseInt(f[1], 10, 64)
	delay := time.Duration(failed - killed)
	if delay > 2*time.Second {
		t.Errorf("the GET failed %v after the kill", delay)
	}
	if !strings.Contains(f[2], "rank 1") || !strings.Contains(f[2], "connection lost") {
		t.Errorf("error %q does not name rank 1 and the lost connection", f[2])
	}
	t.Logf("rank 1 killed after sending %d of %d bytes; the GET failed %v later: %s", sent, killGetSize, delay.Round(time.Microsecond), f[2])
}
