package amigo

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/amigo-hpc/amigo/internal/sysmon"
	"github.com/amigo-hpc/amigo/transport"
)

// The policy a rank gives the runtime's monitor thread, by what the
// adapters report about the host, and the policy put back afterwards.
func TestHoldMonitor(t *testing.T) {
	if tid := sysmon.Thread(); tid != 0 {
		t.Fatalf("the monitor thread %d is held before the test: a client of an earlier test is still open", tid)
	}
	for _, c := range []struct {
		policy  string
		reports []bool
		want    string
		sched   uint32
	}{
		{"auto", []bool{false}, "batch", unix.SCHED_BATCH},
		{"auto", []bool{false, false}, "batch", unix.SCHED_BATCH},
		{"auto", []bool{true}, "normal", 0},
		{"auto", []bool{false, true}, "normal", 0},
		{"auto", nil, "normal", 0},
		{"batch", []bool{true}, "batch", unix.SCHED_BATCH},
		{"idle", nil, "idle", unix.SCHED_IDLE},
		{"normal", []bool{false}, "normal", 0},
	} {
		var ads []transport.Adapter
		for _, o := range c.reports {
			ads = append(ads, hostReport{over: o})
		}
		got, release, err := holdMonitor(ads, c.policy)
		if err != nil {
			t.Fatalf("%s, oversubscribed %v: %v", c.policy, c.reports, err)
		}
		if got != c.want || (release != nil) != (c.want != "normal") {
			t.Errorf("%s, oversubscribed %v: policy %q (release %v), want %q", c.policy, c.reports, got, release != nil, c.want)
		}
		tid := sysmon.Thread()
		if c.want == "normal" {
			if tid != 0 {
				t.Errorf("%s, oversubscribed %v: monitor thread %d held", c.policy, c.reports, tid)
			}
			continue
		}
		a, err := unix.SchedGetAttr(tid, 0)
		if err != nil {
			t.Fatal(err)
		}
		if a.Policy != c.sched {
			t.Errorf("%s, oversubscribed %v: thread %d has policy %d, want %d", c.policy, c.reports, tid, a.Policy, c.sched)
		}
		cl := &Client{monitor: got, monitorRelease: release}
		cl.releaseMonitor()
		cl.releaseMonitor()
		if a, err := unix.SchedGetAttr(tid, 0); err != nil || a.Policy != unix.SCHED_NORMAL {
			t.Errorf("%s: after release, thread %d: policy %v, %v", c.policy, tid, a, err)
		}
		if sysmon.Thread() != 0 {
			t.Errorf("%s: still held after release", c.policy)
		}
	}
	if _, err := (Config{Monitor: "fifo"}).resolve(func(string) (string, bool) { return "", false }); err == nil {
		t.Error("Monitor fifo accepted")
	}
	eff, err := Config{}.resolve(func(k string) (string, bool) {
		return map[string]string{"AMIGO_MONITOR": "idle"}[k], k == "AMIGO_MONITOR"
	})
	if err != nil || eff.Monitor != "idle" {
		t.Errorf("AMIGO_MONITOR=idle: %q, %v", eff.Monitor, err)
	}
}
