package amigo_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/internal/hostmesh"
	"github.com/amigo-hpc/amigo/internal/netns"
)

// rankEnv makes the test binary run as a rank of a launched job.
const rankEnv = "AMIGO_ROOT_TEST_RANK"

func TestMain(m *testing.M) {
	if v := os.Getenv(rankEnv); v != "" {
		if err := runRank(v); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runRank(spec string) error {
	if prog := rankPrograms[spec]; prog != nil {
		return prog()
	}
	f := strings.Split(spec, ":")
	if len(f) == 2 && f[0] == "mcastkill" {
		return mcastKillRank(f[1])
	}
	if len(f) == 2 && f[0] == "mesh" {
		return hostmesh.Rank(f[1])
	}
	if len(f) != 3 || f[0] != "mcast" {
		return fmt.Errorf("unknown rank program %q", spec)
	}
	size, err := strconv.Atoi(f[1])
	if err != nil {
		return err
	}
	return mcastRank(size, f[2])
}

// mcastRank is the rank program of the multi-host multicast test: rank 0
// sends size bytes to every other rank, by one multicast or by one send to
// each, and every other rank checks what it got.
func mcastRank(size int, mode string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := amigo.Open(ctx, amigo.Config{})
	if err != nil {
		return err
	}
	defer cl.Close()
	c := cl.Context(0)
	me, n := cl.Rank(), cl.Size()
	data := make([]byte, size)
	fastFill(data, 11)
	got, dones := 0, 0
	var bad error
	buf := make([]byte, size)
	c.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
		if err := m.Receive(buf, func(err error) {
			if err == nil && !bytes.Equal(buf, data) {
				err = errors.New("data differs")
			}
			if err != nil && bad == nil {
				bad = err
			}
			got++
		}); err != nil && bad == nil {
			bad = err
		}
	})
	c.SetDispatch(2, func(c *amigo.Context, m *amigo.Message) { dones++ })
	bye := false
	c.SetDispatch(4, func(c *amigo.Context, m *amigo.Message) { bye = true })
	// Everyone's handlers are set before rank 0 sends: a message round.
	ready := 0
	c.SetDispatch(3, func(c *amigo.Context, m *amigo.Message) { ready++ })
	if me != 0 {
		if err := c.SendImmediate(amigo.EndpointOf(0), 3, nil, nil); err != nil {
			return err
		}
	} else if err := c.Wait(ctx, func() bool { return ready == n-1 }); err != nil {
		return err
	}
	if me == 0 {
		var targets []amigo.Endpoint
		for r := 1; r < n; r++ {
			targets = append(targets, amigo.EndpointOf(r))
		}
		k := amigo.NewCounter()
		switch mode {
		case "multicast":
			k.Add(1)
			if err := c.Multicast(targets, 1, nil, data, k.Done()); err != nil {
				return err
			}
		case "sends":
			for _, t := range targets {
				k.Add(1)
				if err := c.Send(t, 1, nil, data, k.Done()); err != nil {
					return err
				}
			}
		default:
			return fmt.Errorf("mode %q", mode)
		}
		if err := c.WaitCounter(ctx, k); err != nil {
			return err
		}
		if err := c.Wait(ctx, func() bool { return dones == n-1 }); err != nil {
			return err
		}
		// Let the targets go: each leaves once it has this message, so
		// that none leaves while another still needs it.
		for _, t := range targets {
			k.Add(1)
			if err := c.Send(t, 4, nil, nil, k.Done()); err != nil {
				return err
			}
		}
		if err := c.WaitCounter(ctx, k); err != nil {
			return err
		}
		fmt.Printf("rank 0: %s of %d bytes to %d targets done\n", mode, size, n-1)
		return nil
	}
	if err := c.Wait(ctx, func() bool { return got == 1 }); err != nil {
		return err
	}
	if bad != nil {
		return fmt.Errorf("rank %d: %w", me, bad)
	}
	k := amigo.NewCounter()
	k.Add(1)
	if err := c.Send(amigo.EndpointOf(0), 2, nil, nil, k.Done()); err != nil {
		return err
	}
	if err := c.WaitCounter(ctx, k); err != nil {
		return err
	}
	return c.Wait(ctx, func() bool { return bye })
}

var mcastDone = regexp.MustCompile(`(?m)rank 0: (multicast|sends) of \d+ bytes to \d+ targets done`)

// Over TCP between network-namespace hosts, one rank per host: the origin's
// outbound bytes stay about the data's size as targets grow when it
// multicasts, against one copy per target when it sends to each.
func TestMulticastOutboundBytes(t *testing.T) {
	if why := netns.Available(); why != "" {
		t.Fatal(why)
	}
	const size = 8 << 20
	bin := filepath.Join(t.TempDir(), "amirun")
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if out, err := exec.Command(gobin, "build", "-o", bin, "github.com/amigo-hpc/amigo/cmd/amirun").CombinedOutput(); err != nil {
		t.Fatalf("building amirun: %v\n%s", err, out)
	}
	for _, targets := range []int{2, 4} {
		hosts := targets + 1
		nt := netns.Mesh(t, hosts)
		out := map[string]uint64{}
		for _, mode := range []string{"multicast", "sends"} {
			var before uint64
			for j := 1; j < hosts; j++ {
				before += nt.Counter(0, netns.LinkName(0, j), "tx_bytes")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			cmd := nt.Command(0, bin, "-n", strconv.Itoa(hosts), "--hosts", strings.Join(nt.Hosts, ","),
				"--launch", "ip netns exec {host} {cmd}", "--bind", netns.HostAddr(0), "--timeout", "150s", os.Args[0])
			cmd = exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
			cmd.Env = append(os.Environ(), rankEnv+"=mcast:"+strconv.Itoa(size)+":"+mode, "AMIGO_TRANSPORT=tcp", "GORACE=atexit_sleep_ms=0")
			res, err := cmd.CombinedOutput()
			cancel()
			if err != nil || !mcastDone.Match(res) {
				t.Fatalf("%d targets, %s: %v\n%s", targets, mode, err, res)
			}
			var after uint64
			for j := 1; j < hosts; j++ {
				after += nt.Counter(0, netns.LinkName(0, j), "tx_bytes")
			}
			out[mode] = after - before
			t.Logf("%d targets, %-9s: origin sent %d bytes (%.2f x the data)", targets, mode, out[mode], float64(out[mode])/size)
		}
		if m := out["multicast"]; m < size || float64(m) > 1.3*size {
			t.Errorf("%d targets: multicast origin sent %d bytes, want about %d", targets, m, size)
		}
		if s := out["sends"]; float64(s) < 0.9*float64(targets*size) {
			t.Errorf("%d targets: sends to each moved only %d bytes from the origin", targets, s)
		}
	}
}
