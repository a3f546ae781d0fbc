// Command soak is amigo's chaos soak: it runs jobs of N ranks on this host
// that exchange point-to-point messages of random sizes (inline, eager,
// large enough for STOP and rendezvous), GET and PUT, multicasts and
// collectives, every one checked by a checksum, while it injects faults:
// a fault-injecting TCP proxy in front of each rank's listener (latency,
// jitter, bandwidth, stalls shorter and longer than AMIGO_TCP_TIMEOUT,
// half-closed and reset connections), a rank paused with SIGSTOP shorter
// and longer than the timeout, a rank killed (SIGKILL) in each protocol
// phase, and a receiver that holds every message until the unexpected
// budget is exhausted. It stops by itself after -d and prints a table:
// messages, bytes, faults by kind, checksum failures, duplicates, errors
// reported and by whom, operations that neither completed nor failed, and
// goroutines, descriptors and memory before and after.
//
// Each round is one job of one scenario: its ranks run collectives first,
// report "armed", then the driver injects the fault while traffic goes on
// until the round's end; then every rank drains its operations (bounded),
// exchanges goodbyes with the peers it has no error from, closes, and
// prints its result. The ranks are this binary again, started by
// internal/launch with the job kept going when a rank dies.
//
//	go run ./bench/soak -d 10m
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/amigo-hpc/amigo/internal/launch"
)

// A scenario is one kind of fault, over one adapter.
type scenario struct {
	name      string // fault kind
	transport string // tcp or shm
}

func (s scenario) String() string { return s.name + "/" + s.transport }

// allScenarios lists every fault kind; "none" is the baseline.
func allScenarios() []scenario {
	var out []scenario
	for _, n := range []string{"none", "latency", "jitter", "bandwidth", "stall-short", "stall-long",
		"half-close", "reset", "sigstop-short", "sigstop-long",
		"kill-inline", "kill-eager", "kill-stop", "kill-get", "kill-put", "kill-mcast", "budget"} {
		out = append(out, scenario{n, "tcp"})
	}
	for _, n := range []string{"none", "sigstop-short", "kill-inline", "kill-eager", "kill-stop", "kill-get", "kill-put", "kill-mcast", "budget"} {
		out = append(out, scenario{n, "shm"})
	}
	return out
}

// faultless reports whether a scenario must end with no error at all.
func faultless(name string) bool {
	switch name {
	case "none", "latency", "jitter", "bandwidth", "stall-short", "sigstop-short", "budget":
		return true
	}
	return false
}

type options struct {
	duration, round, timeout time.Duration
	ranks                    int
	only                     string
	seed                     uint64
	jsonOut                  string
	verbose                  bool
	once                     bool
}

func main() {
	if launch.InRank() {
		if err := runRank(); err != nil {
			fmt.Fprintln(os.Stderr, "soak rank:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	flag.DurationVar(&o.duration, "d", 10*time.Minute, "how long to run rounds")
	flag.DurationVar(&o.round, "round", 12*time.Second, "traffic time of one round (one job)")
	flag.DurationVar(&o.timeout, "timeout", 3*time.Second, "AMIGO_TCP_TIMEOUT of the ranks")
	flag.IntVar(&o.ranks, "n", 4, "ranks per job")
	flag.StringVar(&o.only, "scenarios", "all", "comma-separated scenarios (name or name/transport), or all")
	flag.Uint64Var(&o.seed, "seed", uint64(time.Now().UnixNano()), "seed of the first round")
	flag.StringVar(&o.jsonOut, "json", "", "write every round's results to this file")
	flag.BoolVar(&o.verbose, "v", false, "print each round's outcome")
	flag.BoolVar(&o.once, "once", false, "run each scenario once, whatever -d")
	flag.Parse()
	sum, err := soak(o, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	fmt.Print(sum.table())
	if !sum.clean() {
		os.Exit(1)
	}
}

// pickScenarios filters allScenarios by -scenarios.
func pickScenarios(only string) ([]scenario, error) {
	all := allScenarios()
	if only == "" || only == "all" {
		return all, nil
	}
	var out []scenario
	for _, w := range strings.Split(only, ",") {
		n := len(out)
		for _, s := range all {
			if w == s.name || w == s.String() {
				out = append(out, s)
			}
		}
		if len(out) == n {
			return nil, fmt.Errorf("no scenario %q", w)
		}
	}
	return out, nil
}

// soak runs rounds for o.duration and returns their summary.
func soak(o options, log io.Writer) (*summary, error) {
	if o.ranks < 3 {
		return nil, errors.New("-n: want at least 3 ranks (a multicast chain needs two targets)")
	}
	scs, err := pickScenarios(o.only)
	if err != nil {
		return nil, err
	}
	sum := newSummary(o)
	warmNetpoll()
	runtime.GC()
	sum.driverBefore = [2]int{runtime.NumGoroutine(), countFDs()}
	shm0 := shmEntries()
	start := time.Now()
	more := func(i int) bool {
		if o.once {
			return i < len(scs)
		}
		return i == 0 || time.Since(start) < o.duration
	}
	for i := 0; more(i); i++ {
		sc := scs[i%len(scs)]
		rr, err := runRound(o, sc, i, o.seed+uint64(i))
		if err != nil {
			return nil, fmt.Errorf("round %d (%v): %w", i, sc, err)
		}
		sum.add(rr)
		if o.verbose {
			fmt.Fprintf(log, "%s round %3d %-22s %s\n", time.Now().Format("15:04:05"), i, sc, rr.brief())
		}
	}
	sum.elapsed = time.Since(start)
	sum.shmLeft = len(shmEntries()) - len(shm0)
	sum.driverAfter = settleDriver(sum.driverBefore)
	return sum, nil
}

func settleDriver(before [2]int) [2]int {
	deadline := time.Now().Add(5 * time.Second)
	for {
		runtime.GC()
		g, f := runtime.NumGoroutine(), countFDs()
		if (g <= before[0] && f <= before[1]) || time.Now().After(deadline) {
			return [2]int{g, f}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// shmEntries lists amigo's names in /dev/shm (its segments are memfds and
// should leave none).
func shmEntries() []string {
	es, _ := os.ReadDir("/dev/shm")
	var out []string
	for _, e := range es {
		if strings.Contains(e.Name(), "amigo") {
			out = append(out, e.Name())
		}
	}
	return out
}

// roundResult is what one round produced.
type roundResult struct {
	sc       scenario
	victim   int
	results  []*Result // by rank; nil: no result (killed, or failed)
	killedIn string    // phase the victim reported, "external" if the driver killed it
	faults   int       // faults injected (connections hit, signals sent)
	exits    []string  // ranks that exited abnormally, other than the victim of a kill
	missing  []int     // ranks that should have reported and did not
	tails    []string  // output of ranks that misbehaved
	skipped  bool      // the fault was not injected: collectives outlasted the traffic
	shmLeft  int
}

// lineWriter splits a rank's output into lines and hands each to fn; it
// keeps the last lines for diagnosis: keep of them, or 40.
type lineWriter struct {
	mu   sync.Mutex
	buf  []byte
	tail []string
	keep int
	fn   func(string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := slices.Index(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		l := string(w.buf[:i])
		w.buf = w.buf[i+1:]
		if keep := cmp.Or(w.keep, 40); len(w.tail) == keep {
			w.tail = w.tail[1:]
		}
		if !strings.HasPrefix(l, "soak: result ") {
			w.tail = append(w.tail, l)
		}
		if w.fn != nil {
			w.fn(l)
		}
	}
}

func (w *lineWriter) lines() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.tail, "\n")
}

// freePort returns a port nobody listens on now and not in taken (the
// ports given to the round's other ranks, which do not listen yet), below
// the range the kernel hands out for port 0 and for outgoing connections
// (ip_local_port_range), so that no socket made meanwhile (a proxy's
// listener, a connection) takes it before the rank listens on it. It adds
// the port to taken.
func freePort(taken map[int]bool) (int, error) {
	lo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 2048 {
				lo = v
			}
		}
	}
	return freePortBelow(lo, min(lo-1024, 10000), taken)
}

// freePortBelow is freePort among the span ports below lo.
func freePortBelow(lo, span int, taken map[int]bool) (int, error) {
	start := rand.IntN(span)
	for i := range span {
		port := lo - span + (start+i)%span
		if taken[port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			l.Close()
			taken[port] = true
			return port, nil
		}
	}
	return 0, fmt.Errorf("soak: no free port below %d", lo)
}

func runRound(o options, sc scenario, idx int, seed uint64) (*roundResult, error) {
	n := o.ranks
	rr := &roundResult{sc: sc, victim: 1 + idx%(n-1), results: make([]*Result, n)}
	shm0 := len(shmEntries())
	var proxies []*Proxy
	defer func() {
		for _, p := range proxies {
			p.Close()
		}
	}()
	rankEnv := func(int) []string { return nil }
	if sc.transport == "tcp" {
		addrs := make([][]string, n)
		taken := map[int]bool{}
		for r := range n {
			port, err := freePort(taken)
			if err != nil {
				return nil, err
			}
			listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			p, err := NewProxy("127.0.0.1:0", listen)
			if err != nil {
				return nil, err
			}
			proxies = append(proxies, p)
			addrs[r] = []string{"AMIGO_TCP_ADDR=" + listen, "AMIGO_TCP_ADVERTISE=" + p.Addr()}
		}
		rankEnv = func(r int) []string { return addrs[r] }
		var tx Toxics
		switch sc.name {
		case "latency":
			tx.Latency = 20 * time.Millisecond
		case "jitter":
			tx.Latency, tx.Jitter = 2*time.Millisecond, 30*time.Millisecond
		case "bandwidth":
			tx.Bandwidth = 8 << 20
		}
		for _, p := range proxies {
			p.SetToxics(tx)
		}
		if tx != (Toxics{}) {
			rr.faults = len(proxies)
		}
	}
	end := time.Now().Add(o.round)
	env := []string{
		"AMIGO_TRANSPORT=" + sc.transport,
		"AMIGO_TCP_TIMEOUT=" + o.timeout.String(),
		envScenario + "=" + sc.name,
		envSeed + "=" + strconv.FormatUint(seed, 10),
		envEnd + "=" + strconv.FormatInt(end.UnixMilli(), 10),
		envVictim + "=" + strconv.Itoa(rr.victim),
		envTimeout + "=" + o.timeout.String(),
	}
	switch sc.name {
	case "kill-put":
		env = append(env, "AMIGO_STOP_VARIANT=put")
	case "budget":
		env = append(env, "AMIGO_UNEXPECTED_BUDGET="+strconv.Itoa(unexpBudget))
	}
	armed := make(chan int, n)
	killed := make(chan string, 1)
	outs := make([]*lineWriter, n)
	errs := make([]*lineWriter, n)
	var resMu sync.Mutex
	for r := range n {
		outs[r] = &lineWriter{fn: func(l string) {
			switch {
			case l == "soak: armed":
				armed <- r
			case strings.HasPrefix(l, "soak: killed in "):
				select {
				case killed <- strings.TrimPrefix(l, "soak: killed in "):
				default:
				}
			case strings.HasPrefix(l, "soak: result "):
				var res Result
				if err := json.Unmarshal([]byte(strings.TrimPrefix(l, "soak: result ")), &res); err == nil {
					resMu.Lock()
					rr.results[r] = &res
					resMu.Unlock()
				}
			}
		}}
		errs[r] = &lineWriter{keep: 2000} // room for a goroutine dump
	}
	job, err := launch.Start(launch.Options{
		N: n, Argv: []string{os.Args[0]}, Env: env, RankEnv: rankEnv, KeepGoing: true,
		Output: func(r int) (io.Writer, io.Writer) { return outs[r], errs[r] },
	})
	if err != nil {
		return nil, err
	}
	limit := o.round + 3*o.timeout + 90*time.Second
	waitCtx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	// A rank that has not reported its result shortly before the limit
	// hangs: SIGQUIT makes the Go runtime print every goroutine's stack
	// to its standard error, which the round's tails show.
	dump := time.AfterFunc(limit-5*time.Second, func() {
		resMu.Lock()
		defer resMu.Unlock()
		for r := range n {
			if rr.results[r] == nil {
				_ = syscall.Kill(job.Pid(r), syscall.SIGQUIT)
			}
		}
	})
	defer dump.Stop()
	faultDone := make(chan struct{})
	go func() {
		defer close(faultDone)
		rr.inject(o, job, proxies, armed, killed, end)
	}()
	werr := job.Wait(waitCtx)
	cancel()
	<-faultDone
	if werr != nil {
		var ee *launch.ExitErrors
		if !errors.As(werr, &ee) {
			rr.exits = append(rr.exits, werr.Error())
		} else {
			for i, r := range ee.Ranks {
				if r == rr.victim && strings.HasPrefix(sc.name, "kill-") && !rr.skipped {
					continue
				}
				rr.exits = append(rr.exits, ee.Errs[i].Error())
			}
		}
	}
	for r := range n {
		isKilled := r == rr.victim && strings.HasPrefix(sc.name, "kill-") && !rr.skipped
		if rr.results[r] == nil && !isKilled {
			rr.missing = append(rr.missing, r)
		}
	}
	if len(rr.exits) > 0 || len(rr.missing) > 0 || !rr.clean() {
		for r := range n {
			rr.tails = append(rr.tails, rankTail(r, rr.results[r], outs[r].lines(), errs[r].lines()))
		}
	}
	rr.shmLeft = len(shmEntries()) - shm0
	return rr, nil
}

// rankTail is what the report shows of rank r of a round that was not
// clean: the kinds of its operations that neither completed nor failed
// (the first thing to know of a hang; for a receive, the sender and
// sequence number of each), its last multicasts as origin (whose targets
// a multicast receive that hangs waits on) and the last lines of its
// output.
func rankTail(r int, res *Result, stdout, stderr string) string {
	hung := ""
	if res != nil && len(res.HangKinds) > 0 {
		hung = fmt.Sprintf("--- rank %d hangs: %s\n", r, strings.Join(res.HangKinds, ", "))
	}
	if res != nil && len(res.Mcasts) > 0 {
		hung += fmt.Sprintf("--- rank %d multicasts as origin, the last: %s\n", r, strings.Join(res.Mcasts, "; "))
	}
	return fmt.Sprintf("%s--- rank %d stdout:\n%s\n--- rank %d stderr:\n%s", hung, r, stdout, r, stderr)
}

// inject waits for every rank to report armed, then injects the round's
// fault.
func (rr *roundResult) inject(o options, job *launch.Job, proxies []*Proxy, armed <-chan int, killed <-chan string, end time.Time) {
	n := len(rr.results)
	wait := time.NewTimer(time.Until(end.Add(-2 * time.Second)))
	defer wait.Stop()
	for got := 0; got < n; {
		select {
		case <-armed:
			got++
		case <-wait.C:
			// Collectives outlasted the traffic: no fault this round
			// (a rank killed in one would hang its peers' mpi waits,
			// which is not what the round measures).
			rr.skipped = true
			return
		}
	}
	time.Sleep(time.Second)
	v := rr.victim
	pid := job.Pid(v)
	short, long := o.timeout/2, 2*o.timeout+time.Second
	switch sc := rr.sc.name; sc {
	case "stall-short":
		proxies[v].Stall(short)
		rr.faults++
	case "stall-long":
		proxies[v].Stall(long)
		rr.faults++
	case "half-close":
		rr.faults += proxies[v].HalfClose()
	case "reset":
		rr.faults += proxies[v].Reset()
	case "sigstop-short", "sigstop-long":
		d := short
		if sc == "sigstop-long" {
			d = long
		}
		if syscall.Kill(pid, syscall.SIGSTOP) == nil {
			rr.faults++
		}
		time.Sleep(d)
		_ = syscall.Kill(pid, syscall.SIGCONT)
	case "budget":
		rr.signalAll(job, n)
		rr.faults++
	default:
		if !strings.HasPrefix(sc, "kill-") {
			return
		}
		rr.signalAll(job, n)
		select {
		case ph := <-killed:
			rr.killedIn = ph
		case <-time.After(killFallback):
			rr.killedIn = "external"
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		rr.faults++
	}
}

func (rr *roundResult) signalAll(job *launch.Job, n int) {
	for r := range n {
		_ = syscall.Kill(job.Pid(r), syscall.SIGUSR1)
	}
}

// clean reports whether the round found nothing wrong.
func (rr *roundResult) clean() bool {
	if len(rr.exits) > 0 || len(rr.missing) > 0 || rr.shmLeft > 0 {
		return false
	}
	for r, res := range rr.results {
		if res == nil {
			continue
		}
		if res.ChecksumFailures > 0 || res.Duplicates > 0 || res.OutOfOrder > 0 || res.Hangs > 0 ||
			len(res.ByeMissing) > 0 || res.ByeAckErrors > 0 || rr.leaked(r) || rr.lost(r) > 0 {
			return false
		}
		if faultless(rr.sc.name) && rr.errors(r) > 0 {
			return false
		}
		if rr.sc.name == "budget" && res.UnexpectedPeak > unexpBudget {
			return false
		}
	}
	return true
}

func (rr *roundResult) errors(r int) uint64 {
	res := rr.results[r]
	t := res.ErrUnnamed
	for _, e := range res.ErrNamed {
		t += e
	}
	return t
}

func (rr *roundResult) leaked(r int) bool {
	res := rr.results[r]
	return res.GoroutinesAfter > res.GoroutinesBefore || res.FDsAfter > res.FDsBefore
}

// lost counts messages rank r saw complete without error toward a peer
// that never received them, over pairs where neither side reported an
// error naming the other.
func (rr *roundResult) lost(r int) uint64 {
	a := rr.results[r]
	var t uint64
	for p, b := range rr.results {
		if p == r || b == nil || a.ErrNamed[p] > 0 || b.ErrNamed[r] > 0 {
			continue
		}
		if a.SentOK[p] > b.Delivered[r] {
			t += a.SentOK[p] - b.Delivered[r]
		}
	}
	return t
}

func (rr *roundResult) brief() string {
	var ops, ok, failed, hangs, cs, errs uint64
	for r, res := range rr.results {
		if res == nil {
			continue
		}
		for _, k := range res.Kinds {
			ops, ok, failed = ops+k.Issued, ok+k.OK, failed+k.Failed
		}
		hangs += res.Hangs
		cs += res.ChecksumFailures
		errs += rr.errors(r)
	}
	s := fmt.Sprintf("ops %d ok %d failed %d hangs %d checksum %d errors %d faults %d", ops, ok, failed, hangs, cs, errs, rr.faults)
	if rr.killedIn != "" {
		s += " killed: " + rr.killedIn
	}
	if rr.skipped {
		s += " (fault skipped: collectives outlasted the traffic)"
	}
	if !rr.clean() {
		s += " NOT CLEAN"
		if len(rr.exits) > 0 {
			s += fmt.Sprintf(" exits %v", rr.exits)
		}
		if len(rr.missing) > 0 {
			s += fmt.Sprintf(" missing %v", rr.missing)
		}
	}
	return s
}
