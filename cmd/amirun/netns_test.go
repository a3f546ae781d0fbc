package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// testNet is a private network of namespaces: a head namespace holding a
// bridge at 10.251.0.1/24, and hosts attached to it at .2, .3, ... . Nothing
// in it is routed anywhere: traffic stays between these namespaces.
type testNet struct {
	head  string
	hosts []string
}

const netPrefix = "10.251.0."

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// newTestNet creates the namespaces (with names unique to this run) and
// deletes them when the test ends, checking that no process is left in any.
func newTestNet(t *testing.T, nhosts int) *testNet {
	t.Helper()
	if os.Getuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("network namespaces need root")
		}
		t.Skip("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("ip (iproute2) not found")
	}
	var b [4]byte
	rand.Read(b[:])
	id := "amirun-" + hex.EncodeToString(b[:])
	n := &testNet{head: id + "-head"}
	for i := range nhosts {
		n.hosts = append(n.hosts, fmt.Sprintf("%s-h%d", id, i))
	}
	all := append([]string{n.head}, n.hosts...)
	t.Cleanup(func() {
		for _, ns := range all {
			if out, _ := exec.Command("ip", "netns", "pids", ns).Output(); len(strings.TrimSpace(string(out))) > 0 {
				t.Errorf("processes left in namespace %s: %s", ns, strings.Fields(string(out)))
				for _, p := range strings.Fields(string(out)) {
					exec.Command("kill", "-9", p).Run()
				}
			}
			exec.Command("ip", "netns", "del", ns).Run()
		}
	})
	for _, ns := range all {
		ipCmd(t, "netns", "add", ns)
		ipCmd(t, "-n", ns, "link", "set", "lo", "up")
	}
	ipCmd(t, "-n", n.head, "link", "add", "br0", "type", "bridge")
	ipCmd(t, "-n", n.head, "addr", "add", netPrefix+"1/24", "dev", "br0")
	ipCmd(t, "-n", n.head, "link", "set", "br0", "up")
	for i, h := range n.hosts {
		v := fmt.Sprintf("v%d", i)
		ipCmd(t, "-n", n.head, "link", "add", v, "type", "veth", "peer", "name", "eth0", "netns", h)
		ipCmd(t, "-n", n.head, "link", "set", v, "master", "br0", "up")
		ipCmd(t, "-n", h, "addr", "add", fmt.Sprintf("%s%d/24", netPrefix, i+2), "dev", "eth0")
		ipCmd(t, "-n", h, "link", "set", "eth0", "up")
	}
	return n
}

// TestHosts runs amirun in the head namespace with ranks on two other
// "hosts" started by "ip netns exec {host}": the PMI server listens on the
// bridge address, ranks reach it with PMI_PORT, learn each other's
// addresses through the KVS and exchange messages across the bridge; the
// process mapping puts ranks 0,1 on node 0 and 2,3 on node 1.
func TestHosts(t *testing.T) {
	n := newTestNet(t, 2)
	wrap := []string{"ip", "netns", "exec", n.head}
	args := []string{"-n", "4", "--hosts", strings.Join(n.hosts, ","),
		"--launch", "ip netns exec {host} {cmd}", "--bind", netPrefix + "1"}
	res := amirun(t, wrap, args, "exchange", 0)
	h0, h1 := netPrefix+"2", netPrefix+"3"
	checkExchanged(t, res, 4, []int{0, 0, 1, 1}, []string{h0, h0, h1, h1})
}

// TestHostsFailure: a rank failing on another host stops the job there too.
func TestHostsFailure(t *testing.T) {
	n := newTestNet(t, 2)
	wrap := []string{"ip", "netns", "exec", n.head}
	args := []string{"-n", "4", "--grace", "1s", "--hosts", strings.Join(n.hosts, ","),
		"--launch", "ip netns exec {host} {cmd}", "--bind", netPrefix + "1"}
	res := amirun(t, wrap, args, "exit:3:7", 0)
	if res.code != 7 {
		t.Fatalf("exit %d, want 7\nstderr:\n%s", res.code, res.stderr)
	}
}

// TestHostfile: a hostfile in MPICH's form for one namespace host and Open
// MPI's for the other places the ranks as its slots say (one on the first
// host, three on the second, -n from the slots); -ppn 1 over --hosts
// alternates them.
func TestHostfile(t *testing.T) {
	n := newTestNet(t, 2)
	h0, h1 := netPrefix+"2", netPrefix+"3"
	hf := filepath.Join(t.TempDir(), "hosts")
	text := fmt.Sprintf("# two hosts\n%s:1\n%s slots=3\n", n.hosts[0], n.hosts[1])
	if err := os.WriteFile(hf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	wrap := []string{"ip", "netns", "exec", n.head}
	common := []string{"--launch", "ip netns exec {host} {cmd}", "--bind", netPrefix + "1"}
	res := amirun(t, wrap, append([]string{"-f", hf}, common...), "exchange", 0)
	checkExchanged(t, res, 4, []int{0, 1, 1, 1}, []string{h0, h1, h1, h1})

	res = amirun(t, wrap, append([]string{"-n", "4", "-ppn", "1", "--hosts", strings.Join(n.hosts, ",")}, common...), "exchange", 0)
	checkExchanged(t, res, 4, []int{0, 1, 0, 1}, []string{h0, h1, h0, h1})
}
