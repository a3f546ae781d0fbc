// Package netns makes private networks of Linux network namespaces for
// tests: hosts joined by veth pairs, each with addresses of its own, all
// removed when the test ends. It needs root and iproute2's ip command.
//
// Mesh joins every pair of hosts by a veth pair of their own, so that
// traffic between two hosts crosses exactly the link between them, which
// the interface counters of /sys/class/net/*/statistics then show.
package netns

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// Net is a set of network namespaces ("hosts").
type Net struct {
	t     testing.TB
	Hosts []string // namespace names
}

// Available reports why namespaces cannot be made here, or "" if they can.
func Available() string {
	if os.Getuid() != 0 {
		return "network namespaces need root"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "ip (iproute2) not found"
	}
	return ""
}

// New makes n namespaces with names unique to this run, loopback up, and
// deletes them when the test ends, checking that no process is left in any.
func New(t testing.TB, n int) *Net {
	t.Helper()
	if why := Available(); why != "" {
		t.Fatal(why)
	}
	var b [4]byte
	rand.Read(b[:])
	id := "amigo-" + hex.EncodeToString(b[:])
	nt := &Net{t: t}
	for i := range n {
		nt.Hosts = append(nt.Hosts, fmt.Sprintf("%s-h%d", id, i))
	}
	t.Cleanup(func() {
		for _, ns := range nt.Hosts {
			if out, _ := exec.Command("ip", "netns", "pids", ns).Output(); len(strings.TrimSpace(string(out))) > 0 {
				t.Errorf("processes left in namespace %s: %s", ns, strings.Fields(string(out)))
				for _, p := range strings.Fields(string(out)) {
					if pid, err := strconv.Atoi(p); err == nil {
						if proc, err := os.FindProcess(pid); err == nil {
							proc.Kill()
						}
					}
				}
			}
			exec.Command("ip", "netns", "del", ns).Run()
		}
	})
	for _, ns := range nt.Hosts {
		nt.ip("netns", "add", ns)
		nt.ip("-n", ns, "link", "set", "lo", "up")
	}
	return nt
}

func (n *Net) ip(args ...string) {
	n.t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		n.t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// IP runs ip -n <host i> args.
func (n *Net) IP(i int, args ...string) {
	n.t.Helper()
	n.ip(append([]string{"-n", n.Hosts[i]}, args...)...)
}

// Command returns argv to run inside host i.
func (n *Net) Command(i int, argv ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.Hosts[i]}, argv...)...)
}

// Veth joins hosts i and j by a veth pair named ifi (in i) and ifj (in j)
// with addresses addrI and addrJ (CIDR), both up.
func (n *Net) Veth(i, j int, ifi, ifj, addrI, addrJ string) {
	n.t.Helper()
	n.IP(i, "link", "add", ifi, "type", "veth", "peer", "name", ifj, "netns", n.Hosts[j])
	n.IP(i, "addr", "add", addrI, "dev", ifi)
	n.IP(j, "addr", "add", addrJ, "dev", ifj)
	n.IP(i, "link", "set", ifi, "up")
	n.IP(j, "link", "set", ifj, "up")
}

// Counter reads a statistics counter (rx_bytes, tx_bytes, ...) of interface
// ifname in host i, from /sys/class/net/<ifname>/statistics as the host
// sees it.
func (n *Net) Counter(i int, ifname, which string) uint64 {
	n.t.Helper()
	out, err := n.Command(i, "cat", "/sys/class/net/"+ifname+"/statistics/"+which).Output()
	if err != nil {
		n.t.Fatalf("%s: %s of %s: %v", n.Hosts[i], which, ifname, err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		n.t.Fatalf("%s: %s of %s: %q", n.Hosts[i], which, ifname, out)
	}
	return v
}

// HostAddr is the address of host i in a Mesh: on its loopback, reached
// from every other host over the veth pair between them.
func HostAddr(i int) string { return fmt.Sprintf("10.200.0.%d", i+1) }

// LinkName is the name, in host i, of its end of the veth pair to host j in
// a Mesh.
func LinkName(i, j int) string { return fmt.Sprintf("to%d", j) }

// Mesh makes n hosts, each with the address HostAddr(i), and joins every
// pair by a veth pair of its own (a /30 of 10.201.0.0/16), with routes so
// that host i reaches host j's address over their link, from its own host
// address.
func Mesh(t testing.TB, n int) *Net {
	t.Helper()
	nt := New(t, n)
	for i := range n {
		nt.IP(i, "addr", "add", HostAddr(i)+"/32", "dev", "lo")
	}
	for i := range n {
		for j := i + 1; j < n; j++ {
			sub := i*n + j
			ai, aj := fmt.Sprintf("10.201.%d.1", sub), fmt.Sprintf("10.201.%d.2", sub)
			nt.Veth(i, j, LinkName(i, j), LinkName(j, i), ai+"/30", aj+"/30")
			nt.IP(i, "route", "add", HostAddr(j)+"/32", "via", aj, "dev", LinkName(i, j), "src", HostAddr(i))
			nt.IP(j, "route", "add", HostAddr(i)+"/32", "via", ai, "dev", LinkName(j, i), "src", HostAddr(j))
		}
	}
	return nt
}
