package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/internal/launch"
)

var smoke = flag.Bool("soak", false, "run the soak's smoke test (a few rounds of real jobs, about 30s)")

// TestMain makes the test binary a rank of the jobs the smoke test starts.
func TestMain(m *testing.M) {
	if launch.InRank() {
		if err := runRank(); err != nil {
			fmt.Fprintln(os.Stderr, "soak rank:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A few rounds of the soak, one per kind of fault (the proxy, a pause
// shorter than the timeout, a kill in a protocol phase, the unexpected
// budget), find nothing wrong: no checksum failure, duplicate, hang or
// leak, and errors only where a fault makes them. Run with -soak; the full
// soak is the command (go run ./bench/soak).
func TestSoakSmoke(t *testing.T) {
	if !*smoke {
		t.Skip("the soak's smoke test runs with -soak (it starts 4-rank jobs for about 30s)")
	}
	o := options{round: 6 * time.Second, timeout: 2 * time.Second, ranks: 4, seed: uint64(time.Now().UnixNano()), once: true,
		only: "jitter/tcp,reset/tcp,sigstop-short/tcp,kill-mcast/shm,budget/shm"}
	var log strings.Builder
	o.verbose = true
	sum, err := soak(o, &log)
	if err != nil {
		t.Fatal(err)
	}
	table := sum.table()
	t.Logf("seed %d\n%s\n%s", o.seed, log.String(), table)
	if !sum.clean() {
		t.Fatalf("the soak found something wrong (seed %d):\n%s", o.seed, table)
	}
	if len(sum.rounds) != 5 {
		t.Fatalf("%d rounds, want 5", len(sum.rounds))
	}
	for _, rr := range sum.rounds {
		if rr.faults == 0 {
			t.Errorf("round %v injected no fault", rr.sc)
		}
	}
}
