package amigo_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/exp/trace"

	"github.com/amigo-hpc/amigo"
)

// rankPrograms are programs the test binary runs when started with
// AMIGO_ROOT_TEST_RANK set to their name (TestMain, runRank). The
// variables they test (AMIGO_METRICS_ADDR, AMIGO_TRACE, AMIGO_LOG) are
// read when a process opens its first client, so each runs in a process
// of its own.
var rankPrograms = map[string]func() error{
	"metrics": metricsProgram,
	"trace":   traceProgram,
}

// metricsProgram runs two in-process ranks, rank 0 sending to rank 1 until
// its standard input closes, and prints the address it serves metrics at.
// Then it closes rank 1 and sends to it once more, a peer failure.
func metricsProgram() error {
	cl, err := amigo.NewLocal(2, amigo.Config{})
	if err != nil {
		return err
	}
	defer cl[0].Close()
	a, b := cl[0].Context(0), cl[1].Context(0)
	var got atomic.Int64
	if err := b.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) { got.Add(1) }); err != nil {
		return err
	}
	fmt.Printf("addr %s\n", amigo.MetricsAddr())
	var stop atomic.Bool
	go func() { io.Copy(io.Discard, os.Stdin); stop.Store(true) }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	recvDone := make(chan error, 1)
	go func() { recvDone <- b.Wait(ctx, stop.Load) }()
	for sent := 0; !stop.Load() && ctx.Err() == nil; sent++ {
		if err := a.SendImmediate(amigo.EndpointOf(1), 1, nil, []byte("12345678")); err != nil {
			return err
		}
		a.Advance()
		if sent%64 == 0 {
			time.Sleep(time.Millisecond) // leave the scraper some processor
		}
	}
	if err := <-recvDone; err != nil {
		return err
	}
	reg, err := cl[1].RegisterMemory(make([]byte, 64))
	if err != nil {
		return err
	}
	cl[1].Close()
	var getErr error
	finished := false
	if err := a.Get(amigo.EndpointOf(1), make([]byte, 8), reg.Key(), 0, func(err error) { finished, getErr = true, err }); err != nil {
		return err
	}
	if err := a.Wait(ctx, func() bool { return finished }); err != nil {
		return err
	}
	// A peer that closed in order said goodbye: it did not fail.
	if st := a.Stats(); getErr == nil || st.PeerGoodbyes != 1 || st.PeerFailures != 0 {
		return fmt.Errorf("Get from a closed rank: %v, %d peer goodbyes, %d peer failures", getErr, st.PeerGoodbyes, st.PeerFailures)
	}
	return nil
}

var sentInline = regexp.MustCompile(`(?m)^amigo_messages_sent_total\{rank="0",context="0",protocol="inline"\} (\d+)$`)
var receivedInline = regexp.MustCompile(`(?m)^amigo_messages_received_total\{rank="1",context="0",protocol="inline"\} (\d+)$`)

// TestMetrics scrapes a running job's AMIGO_METRICS_ADDR: the Prometheus
// text shows rank 0's messages sent and rank 1's received growing from one
// scrape to the next, expvar's JSON holds both ranks, and AMIGO_LOG=debug
// logged the set-up, the connection and the peer failure with rank and
// peer.
func TestMetrics(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), rankEnv+"=metrics", amigo.MetricsAddrEnv+"=127.0.0.1:0", amigo.LogEnv+"=debug", amigo.TraceEnv+"=0")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	defer func() {
		stdin.Close()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			t.Error("the rank program did not end")
		}
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	go func() { done <- cmd.Wait() }()
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "addr ")
	if err != nil || !ok || addr == "" {
		t.Fatalf("no address from the rank program: %q %v\n%s", line, err, stderr.String())
	}
	client := &http.Client{Timeout: 30 * time.Second}
	scrape := func(path string) string {
		t.Helper()
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
		}
		return string(b)
	}
	value := func(re *regexp.Regexp, text string) uint64 {
		t.Helper()
		m := re.FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no %s in\n%s", re, text)
		}
		v, _ := strconv.ParseUint(m[1], 10, 64)
		return v
	}
	first := scrape("/metrics")
	s0, r0 := value(sentInline, first), value(receivedInline, first)
	for _, want := range []string{"# TYPE amigo_messages_sent_total counter", `amigo_peers{rank="0",adapter="loop"} 1`,
		`amigo_wait_sleep_seconds_total{rank="1",context="0"}`, `amigo_stops_total{rank="0",context="0",direction="sent"}`} {
		if !strings.Contains(first, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// The counters grow while rank 0 sends: scrape until both did.
	deadline := time.Now().Add(60 * time.Second)
	for {
		text := scrape("/metrics")
		s1, r1 := value(sentInline, text), value(receivedInline, text)
		if s1 > s0 && r1 > r0 {
			t.Logf("sent %d -> %d, received %d -> %d", s0, s1, r0, r1)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("counters did not grow: sent %d -> %d, received %d -> %d", s0, s1, r0, r1)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var vars struct {
		Amigo []struct {
			Rank     int
			Contexts []struct{ SentInline, ReceivedInline uint64 }
		} `json:"amigo"`
	}
	if err := json.Unmarshal([]byte(scrape("/debug/vars")), &vars); err != nil {
		t.Fatal(err)
	}
	if len(vars.Amigo) != 2 || vars.Amigo[1].Rank != 1 || vars.Amigo[1].Contexts[0].ReceivedInline == 0 {
		t.Fatalf("expvar amigo: %+v", vars.Amigo)
	}
	stdin.Close()
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Fatalf("rank program: %v\n%s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("rank program did not end")
	}
	log := stderr.String()
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`level=INFO msg="client open" .*rank=0 size=2`),
		regexp.MustCompile(`level=INFO msg="serving metrics" .*addr=` + regexp.QuoteMeta(addr)),
		regexp.MustCompile(`level=DEBUG msg=connected .*rank=0 context=0 peer=1 peer_context=0 adapter=loop`),
		// A peer that closed in order is no failure: logged at debug.
		regexp.MustCompile(`level=DEBUG msg="peer closed" .*rank=0 context=0 peer=1 `),
	} {
		if !want.MatchString(log) {
			t.Errorf("log lacks %s:\n%s", want, log)
		}
	}
}

// traceProgram runs two in-process ranks that exchange what the trace
// annotates: a send with a completion, an immediate send, a large message
// received into a buffer, a Put, a Get and a barrier.
func traceProgram() error {
	cl, err := amigo.NewLocal(2, amigo.Config{})
	if err != nil {
		return err
	}
	defer cl[1].Close()
	defer cl[0].Close()
	a, b := cl[0].Context(0), cl[1].Context(0)
	big := make([]byte, 1<<20)
	buf := make([]byte, len(big))
	got := 0
	if err := b.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
		if m.Inline() {
			got++
			return
		}
		if err := m.Receive(buf, func(error) { got++ }); err != nil {
			panic(err)
		}
	}); err != nil {
		return err
	}
	reg, err := cl[1].RegisterMemory(make([]byte, 4096))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bdone := make(chan error, 1)
	go func() {
		err := b.Wait(ctx, func() bool { return got == 3 })
		if err == nil {
			err = cl[1].Barrier(ctx)
		}
		bdone <- err
	}()
	ep := amigo.EndpointOf(1)
	k := amigo.NewCounter()
	k.Add(4)
	if err := a.Send(ep, 1, nil, []byte("small"), k.Done()); err != nil {
		return err
	}
	if err := a.SendImmediate(ep, 1, nil, []byte("immediate")); err != nil {
		return err
	}
	if err := a.Send(ep, 1, nil, big, k.Done()); err != nil {
		return err
	}
	if err := a.Put(ep, []byte("put"), reg.Key(), 0, k.Done()); err != nil {
		return err
	}
	if err := a.Get(ep, make([]byte, 8), reg.Key(), 8, k.Done()); err != nil {
		return err
	}
	if err := a.WaitCounter(ctx, k); err != nil {
		return err
	}
	if err := cl[0].Barrier(ctx); err != nil {
		return err
	}
	return <-bdone
}

// TestTrace runs the trace program with AMIGO_TRACE naming a file prefix:
// the process starts the tracer itself, and the file it leaves parses with
// the execution tracer's reader and holds amigo's regions and tasks.
func TestTrace(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	prefix := filepath.Join(t.TempDir(), "tr")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, "-test.run=^$")
	cmd.Env = append(os.Environ(), rankEnv+"=trace", amigo.TraceEnv+"="+prefix)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("trace program: %v\n%s", err, out)
	}
	f, err := os.Open(prefix + ".0")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := trace.NewReader(bufio.NewReader(f))
	if err != nil {
		t.Fatal(err)
	}
	regions, tasks, logs := map[string]int{}, map[string]int{}, 0
	for {
		ev, err := r.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Kind() {
		case trace.EventRegionBegin:
			regions[ev.Region().Type]++
		case trace.EventTaskBegin:
			tasks[ev.Task().Type]++
		case trace.EventLog:
			if ev.Log().Category == "amigo" {
				logs++
			}
		}
	}
	want := map[string]int{"amigo.Send": 2, "amigo.SendImmediate": 1, "amigo.Handler": 3, "amigo.Put": 1, "amigo.Get": 1, "amigo.Barrier": 2}
	for name, n := range want {
		if regions[name] < n {
			t.Errorf("%d regions %s, want at least %d (regions %v)", regions[name], name, n, regions)
		}
	}
	wantTasks := map[string]int{"amigo.Send": 2, "amigo.Receive": 1, "amigo.Put": 1, "amigo.Get": 1}
	for name, n := range wantTasks {
		if tasks[name] != n {
			t.Errorf("%d tasks %s, want %d (tasks %v)", tasks[name], name, n, tasks)
		}
	}
	if logs < 8 {
		t.Errorf("%d amigo log events", logs)
	}
}
