// Command amirun starts N ranks of a program and serves them PMI, so that an
// amigo program runs on a laptop exactly as it does under mpiexec or srun:
//
//	amirun -n 4 ./prog args...
//	amirun -n 8 --hosts node1,node2 --bind 10.0.0.1 ./prog
//
// Each rank gets PMI_FD (or, on other hosts, PMI_PORT and PMI_ID),
// PMI_RANK, PMI_SIZE, and AMIGO_JOB_SECRET, a fresh random secret per job.
// Ranks are spread over the hosts in blocks (ranks 0..k-1 on the first),
// and PMI_process_mapping tells them which ranks share a host.
//
// amirun exits with the status of the first rank that fails (exits
// non-zero, is killed by a signal — reported as 128+signal — aborts through
// PMI, or exits without PMI finalize after opening the job), and then stops
// the others: SIGTERM to each rank's process group, SIGKILL after --grace.
// SIGINT, SIGTERM and SIGHUP are forwarded to all ranks. With --timeout the
// job is stopped after that long and amirun exits 124. amirun makes itself
// a child subreaper, so processes that ranks leave behind are stopped too.
// Ranks read standard input from /dev/null.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	n         int
	tagOutput bool
	timeout   time.Duration
	grace     time.Duration
	hosts     []string
	launch    string
	bind      string
	prog      []string
}

const defaultLaunch = "ssh -o BatchMode=yes -T {host} {shcmd}"

func parseArgs(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("amirun", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.n, "n", 1, "number of ranks")
	fs.IntVar(&o.n, "np", 1, "same as -n")
	fs.BoolVar(&o.tagOutput, "tag-output", false, "prefix every line of output with [rank]")
	fs.DurationVar(&o.timeout, "timeout", 0, "stop the job and exit 124 after this long (0: no limit)")
	fs.DurationVar(&o.grace, "grace", 3*time.Second, "time between SIGTERM and SIGKILL when stopping ranks")
	hosts := fs.String("hosts", "", "comma-separated hosts to spread the ranks over (default: this host, no launch command)")
	fs.StringVar(&o.launch, "launch", defaultLaunch,
		"command that starts a rank on {host}; {cmd} is the command as separate arguments, {shcmd} as one shell-quoted argument; {cmd} is appended if neither appears")
	fs.StringVar(&o.bind, "bind", "", "host[:port] where the PMI server listens for ranks on --hosts (default: all interfaces, advertised by hostname)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: amirun -n N [flags] prog [args...]\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o.prog = fs.Args()
	if len(o.prog) == 0 {
		fs.Usage()
		return nil, fmt.Errorf("no program given")
	}
	if o.n < 1 || o.n > 1<<16 {
		return nil, fmt.Errorf("-n %d: want 1 to 65536 ranks", o.n)
	}
	if *hosts != "" {
		for _, h := range strings.Split(*hosts, ",") {
			if h = strings.TrimSpace(h); h != "" {
				o.hosts = append(o.hosts, h)
			}
		}
	}
	if o.grace <= 0 {
		o.grace = time.Second
	}
	return o, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseArgs(args, stderr)
	if err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		fmt.Fprintf(stderr, "amirun: %v\n", err)
		return 2
	}
	return newJob(o, stdout, stderr).run()
}
