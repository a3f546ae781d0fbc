// Package hostmesh is a multi-host test of amigo's adapters: a job of
// ranks on several hosts made of network namespaces (internal/netns),
// launched by amirun, in which every rank exchanges messages with every
// other and the links between the hosts show the traffic crossed them.
// The tests of each adapter that reaches between hosts run it.
package hostmesh

import (
	"bytes"
	"context"
	"encoding/binary"
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
	"github.com/amigo-hpc/amigo/internal/netns"
)

// Size is the size of the large message each rank sends each other rank,
// the argument Rank expects in a test of the usual size.
const Size = 4 << 20

// meshFill is the content of message seq from src to dst.
func fill(b []byte, src, dst, seq int) []byte {
	for i := range b {
		b[i] = byte(src*37 + dst*11 + seq*5 + i + i>>9)
	}
	return b
}

// Rank is the rank program of the test: every rank sends every other rank
// 50 small messages and one of size bytes (arg; fetched by GET from the
// sender's adapter), checks what it gets, and leaves once all ranks are
// done. It opens its client from the environment the launcher gave it.
func Rank(arg string) error {
	size, err := strconv.Atoi(arg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := amigo.Open(ctx, amigo.Config{})
	if err != nil {
		return err
	}
	defer cl.Close()
	c := cl.Context(0)
	me, n := cl.Rank(), cl.Size()
	const small = 50
	var bad error
	got, dones := 0, 0
	next := make([]int, n)
	c.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
		src := m.Source.Rank
		seq := int(binary.LittleEndian.Uint32(m.Header))
		if seq != next[src] && bad == nil {
			bad = fmt.Errorf("from rank %d: message %d, want %d", src, seq, next[src])
		}
		next[src]++
		if m.Inline() {
			if !bytes.Equal(m.Data, fill(make([]byte, len(m.Data)), src, me, seq)) && bad == nil {
				bad = fmt.Errorf("from rank %d: message %d corrupt", src, seq)
			}
			got++
			return
		}
		buf := make([]byte, m.Size())
		if err := m.Receive(buf, func(err error) {
			if err == nil && !bytes.Equal(buf, fill(make([]byte, len(buf)), src, me, seq)) {
				err = fmt.Errorf("from rank %d: message %d corrupt", src, seq)
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
	k := amigo.NewCounter()
	var sendErr error
	for seq := 0; seq <= small; seq++ {
		for p := 0; p < n; p++ {
			if p == me {
				continue
			}
			l := 100 + seq
			if seq == small {
				l = size
			}
			k.Add(1)
			done := k.Done()
			if err := c.Send(amigo.EndpointOf(p), 1, binary.LittleEndian.AppendUint32(nil, uint32(seq)), fill(make([]byte, l), me, p, seq), func(err error) {
				if err != nil && sendErr == nil {
					sendErr = err
				}
				done(err)
			}); err != nil {
				return err
			}
		}
	}
	total := (small + 1) * (n - 1)
	if err := c.Wait(ctx, func() bool { return got == total && k.Pending() == 0 || bad != nil || sendErr != nil }); err != nil {
		return fmt.Errorf("rank %d: received %d of %d: %w", me, got, total, err)
	}
	if bad != nil || sendErr != nil {
		return fmt.Errorf("rank %d: %v %v", me, bad, sendErr)
	}
	for p := 0; p < n; p++ {
		if p != me {
			k.Add(1)
			c.Send(amigo.EndpointOf(p), 2, nil, nil, k.Done())
		}
	}
	if err := c.Wait(ctx, func() bool { return dones == n-1 && k.Pending() == 0 }); err != nil {
		return fmt.Errorf("rank %d: %d of %d peers done: %w", me, dones, n-1, err)
	}
	fmt.Printf("rank %d: mesh ok, %d messages from %d peers, %d bytes each way with each, adapters %v\n", me, got, n-1, size, cl.Adapters())
	return nil
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

var meshLine = regexp.MustCompile(`(?m)^\[\d+\] rank (\d+): mesh ok`)

// Run starts a job of six ranks on three hosts (network namespaces), each
// pair joined by a veth pair of its own, with amirun --hosts; every rank
// runs Rank. test is the test binary (os.Args[0]); rankEnv is the variable
// by which it runs as a rank, given the value rankSpec. env reaches the
// ranks (AMIGO_TRANSPORT and the like). Every rank must report the mesh
// done over the adapters named by adapters, and the interface counters of
// every link must show the traffic between its two hosts crossed it.
func Run(t *testing.T, test, rankEnv, rankSpec, adapters string, env ...string) {
	t.Helper()
	const hosts, perHost = 3, 2
	nt := netns.Mesh(t, hosts)
	bin := filepath.Join(t.TempDir(), "amirun")
	if out, err := exec.Command(goTool(), "build", "-o", bin, "github.com/amigo-hpc/amigo/cmd/amirun").CombinedOutput(); err != nil {
		t.Fatalf("building amirun: %v\n%s", err, out)
	}
	type end struct {
		host int
		name string
	}
	var ends []end
	for i := 0; i < hosts; i++ {
		for j := 0; j < hosts; j++ {
			if i != j {
				ends = append(ends, end{i, netns.LinkName(i, j)})
			}
		}
	}
	read := func() map[end][2]uint64 {
		m := map[end][2]uint64{}
		for _, e := range ends {
			m[e] = [2]uint64{nt.Counter(e.host, e.name, "tx_bytes"), nt.Counter(e.host, e.name, "rx_bytes")}
		}
		return m
	}
	before := read()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := nt.Command(0, bin, "-n", strconv.Itoa(hosts*perHost), "--hosts", strings.Join(nt.Hosts, ","),
		"--launch", "ip netns exec {host} {cmd}", "--bind", netns.HostAddr(0), "--timeout", "150s", "--tag-output", test)
	cmd = exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	cmd.Env = append(append(os.Environ(), rankEnv+"="+rankSpec, "GORACE=atexit_sleep_ms=0"), env...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("amirun: %v\n%s", err, out)
	}
	ok := map[string]bool{}
	for _, m := range meshLine.FindAllStringSubmatch(string(out), -1) {
		ok[m[1]] = true
	}
	if len(ok) != hosts*perHost {
		t.Fatalf("%d ranks report the mesh done, want %d\n%s", len(ok), hosts*perHost, out)
	}
	if c := strings.Count(string(out), "adapters "+adapters); c != hosts*perHost {
		t.Fatalf("%d ranks say %q, want %d\n%s", c, adapters, hosts*perHost, out)
	}
	t.Logf("%d ranks on %d hosts exchanged in %v", hosts*perHost, hosts, time.Since(start).Round(time.Millisecond))
	after := read()
	// Between two hosts, each direction carries at least the large
	// messages of perHost senders to perHost receivers.
	want := uint64(perHost * perHost * Size)
	for _, e := range ends {
		tx, rx := after[e][0]-before[e][0], after[e][1]-before[e][1]
		t.Logf("%s %-4s tx %10d rx %10d bytes", nt.Hosts[e.host], e.name, tx, rx)
		if tx < want || rx < want {
			t.Errorf("%s %s carried tx %d rx %d bytes, want at least %d each way", nt.Hosts[e.host], e.name, tx, rx, want)
		}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("timed out")
	}
}
