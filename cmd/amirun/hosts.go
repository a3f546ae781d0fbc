package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// host is one entry of a hostfile or of --hosts: a name and how many ranks
// it takes before the next host gets any (0: not said).
type host struct {
	name  string
	slots int
}

// parseHostEntry reads one host in MPICH's form ("name" or "name:slots")
// or Open MPI's ("name slots=N", also "max_slots=N", which is ignored).
func parseHostEntry(s string) (host, error) {
	f := strings.Fields(s)
	if len(f) == 0 {
		return host{}, fmt.Errorf("empty host")
	}
	h := host{name: f[0]}
	if name, n, ok := strings.Cut(f[0], ":"); ok {
		slots, err := strconv.Atoi(n)
		if err != nil || slots < 1 || name == "" {
			return host{}, fmt.Errorf("%q: want host:slots with slots at least 1", f[0])
		}
		h = host{name: name, slots: slots}
	}
	for _, kv := range f[1:] {
		k, v, ok := strings.Cut(kv, "=")
		switch {
		case ok && (k == "slots" || k == "cpu" || k == "cpus"):
			slots, err := strconv.Atoi(v)
			if err != nil || slots < 1 {
				return host{}, fmt.Errorf("%q: want %s=N with N at least 1", kv, k)
			}
			h.slots = slots
		case ok && k == "max_slots":
		default:
			return host{}, fmt.Errorf("%q after host %s: want slots=N", kv, h.name)
		}
	}
	return h, nil
}

// parseHostfile reads a hostfile: one host per line in either form,
// "#" starting a comment, blank lines ignored. A host listed twice adds up
// its slots at its first place.
func parseHostfile(r io.Reader, name string) ([]host, error) {
	var out []host
	at := map[string]int{}
	sc := bufio.NewScanner(r)
	for ln := 1; sc.Scan(); ln++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if strings.TrimSpace(line) == "" {
			continue
		}
		h, err := parseHostEntry(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", name, ln, err)
		}
		if h.slots == 0 {
			h.slots = 1 // both launchers' default
		}
		if i, dup := at[h.name]; dup {
			out[i].slots += h.slots
			continue
		}
		at[h.name] = len(out)
		out = append(out, h)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no hosts", name)
	}
	return out, nil
}

// readHostfile opens and parses a hostfile.
func readHostfile(path string) ([]host, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseHostfile(f, path)
}

// parseHostList reads --hosts: comma-separated hosts, each "name" or
// "name:slots".
func parseHostList(s string) ([]host, error) {
	var out []host
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		if strings.ContainsAny(e, " \t") {
			return nil, fmt.Errorf("--hosts %q: want name or name:slots", e)
		}
		h, err := parseHostEntry(e)
		if err != nil {
			return nil, fmt.Errorf("--hosts: %v", err)
		}
		out = append(out, h)
	}
	return out, nil
}

// place returns the host of every one of n ranks.
//
// With ppn, hosts take ppn ranks each in turn, round again if ranks are
// left (mpiexec.hydra's -ppn). Otherwise, if the hosts have slots (a
// hostfile, host:slots), each host takes as many ranks as it has slots, in
// order, round again if ranks are left (as MPICH does; Open MPI would need
// --oversubscribe). Hosts without slots share the ranks in equal blocks,
// ranks 0..k-1 on the first.
func place(n int, hosts []host, ppn int) []int {
	out := make([]int, n)
	if len(hosts) <= 1 {
		return out
	}
	slots := func(h host) int { return ppn }
	if ppn <= 0 {
		if hosts[0].slots == 0 {
			return nodes(n, len(hosts))
		}
		slots = func(h host) int { return max(h.slots, 1) }
	}
	for r, h, used := 0, 0, 0; r < n; r++ {
		for used >= slots(hosts[h]) {
			h, used = (h+1)%len(hosts), 0
		}
		out[r] = h
		used++
	}
	return out
}

// nodes spreads n ranks over h hosts in blocks: host i gets ranks
// [i*n/h, (i+1)*n/h).
func nodes(n, h int) []int {
	out := make([]int, n)
	if h <= 1 {
		return out
	}
	for i := range h {
		for r := i * n / h; r < (i+1)*n/h; r++ {
			out[r] = i
		}
	}
	return out
}

// expandNodelist expands a Slurm node list ("node[01-03,07],login1") into
// host names, keeping the digits' zero padding.
func expandNodelist(s string) ([]string, error) {
	var out []string
	for _, item := range splitTop(s) {
		if item == "" {
			continue
		}
		names, err := expandOne(item)
		if err != nil {
			return nil, fmt.Errorf("node list %q: %v", s, err)
		}
		out = append(out, names...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("node list %q: no nodes", s)
	}
	return out, nil
}

// splitTop splits s at the commas outside brackets.
func splitTop(s string) []string {
	var out []string
	depth, from := 0, 0
	for i, c := range s {
		switch c {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[from:i])
				from = i + 1
			}
		}
	}
	return append(out, s[from:])
}

// expandOne expands one name with any number of bracketed ranges.
func expandOne(s string) ([]string, error) {
	open := strings.IndexByte(s, '[')
	if open < 0 {
		if strings.ContainsRune(s, ']') {
			return nil, fmt.Errorf("%q: ']' without '['", s)
		}
		return []string{s}, nil
	}
	end := strings.IndexByte(s[open:], ']')
	if end < 0 {
		return nil, fmt.Errorf("%q: '[' without ']'", s)
	}
	end += open
	prefix, ranges, rest := s[:open], s[open+1:end], s[end+1:]
	tails, err := expandOne(rest)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, rg := range strings.Split(ranges, ",") {
		lo, hi, isRange := strings.Cut(rg, "-")
		if !isRange {
			hi = lo
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || a > b || lo == "" || b-a > 1<<16 {
			return nil, fmt.Errorf("%q: bad range %q", s, rg)
		}
		for i := a; i <= b; i++ {
			num := fmt.Sprintf("%0*d", len(lo), i)
			for _, t := range tails {
				out = append(out, prefix+num+t)
			}
		}
	}
	return out, nil
}

// isLocal reports whether every host names this machine: such a job runs
// its ranks as children of amirun, as one without hosts does.
func isLocal(hosts []host) bool {
	me, _ := os.Hostname()
	for _, h := range hosts {
		if h.name != "localhost" && h.name != "127.0.0.1" && h.name != me {
			return false
		}
	}
	return true
}
