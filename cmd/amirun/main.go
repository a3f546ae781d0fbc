// Command amirun starts N ranks of a program and serves them PMI, so that an
// amigo program runs on a laptop exactly as it does under mpiexec or srun,
// with the habits of mpirun and mpiexec.hydra:
//
//	amirun -n 4 ./prog args...
//	amirun -n 8 --hosts node1,node2 --bind 10.0.0.1 ./prog
//	amirun -f hosts -ppn 2 -x OMP_NUM_THREADS -genv AMIGO_LOG info ./prog
//	amirun -n 2 --bind-to core --report-bindings ./prog
//
// Each rank gets PMI_FD (or, on other hosts, PMI_PORT and PMI_ID),
// PMI_RANK, PMI_SIZE, and AMIGO_JOB_SECRET, a fresh random secret per job,
// and the variables of -x VAR (amirun's value, or -x VAR=value) and
// -genv VAR value.
//
// Hosts come from --hosts (name or name:slots, comma-separated), from
// -f/--hostfile (one host a line, MPICH's "host:slots" or Open MPI's
// "host slots=N"; -n defaults to the slots' sum), or, inside a Slurm
// allocation, from SLURM_JOB_NODELIST (-n from SLURM_NTASKS, ranks started
// with srun). A host takes as many ranks as its slots in turn (-ppn N: N
// each), round again if ranks are left; hosts without slots share them in
// equal blocks, ranks 0..k-1 on the first. A list that names only this
// machine runs the ranks here. PMI_process_mapping tells the ranks which
// of them share a host.
//
// --bind-to core pins each rank to a core of its own (sched_setaffinity,
// set before the rank starts, so that all its threads inherit it); ranks of
// a host take amirun's cores in turn. --report-bindings prints them.
//
// amirun exits with the status of the first rank that fails (exits
// non-zero, is killed by a signal — reported as 128+signal — aborts through
// PMI, or exits without PMI finalize after opening the job), saying which
// rank on which host, and then stops the others: SIGTERM to each rank's
// process group, SIGKILL after --grace. With --keep-going (or inside a
// Slurm job run with --no-kill, SLURM_NO_KILL) the others go on instead:
// a program that survives the loss of ranks (package mpi's Shrink and
// Agree) finishes, and amirun still exits with the first failed rank's
// status once every rank has ended; a rank that aborts through PMI stops
// the job all the same. The ranks get AMIGO_KEEP_GOING=1, and amirun
// publishes each rank it lost to the others through PMI
// (bootstrap.LostRanks): amigo then reports the lost rank as failed
// (amigo.ErrLost) even where its adapter could not tell. SIGINT, SIGTERM and SIGHUP are
// forwarded to all ranks. With --timeout the job is stopped after that long
// and amirun exits 124. amirun makes itself a child subreaper, so processes
// that ranks leave behind are stopped too. Ranks read standard input from
// /dev/null.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
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
	hosts     []host
	local     bool // every rank on this host, as children of amirun
	ppn       int
	launch    string
	bind      string
	env       []string // VAR=value for every rank (-x, -genv)
	bindTo    string   // "core" or "none"
	report    bool     // --report-bindings
	keepGoing bool     // --keep-going: a failed rank does not stop the job
	prog      []string
}

const (
	defaultLaunch = "ssh -o BatchMode=yes -T {host} {shcmd}"
	// slurmLaunch starts a rank on a node of the Slurm allocation amirun
	// runs in, as mpiexec.hydra does there.
	slurmLaunch = "srun --nodes=1 --ntasks=1 --nodelist={host} --overlap --export=ALL {cmd}"
)

// listFlag collects the values of a flag given several times.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// joinGenv turns MPICH's "-genv VAR value" (two arguments) into
// "-genv=VAR=value" for the flag package, up to the program's name: the
// first argument that is no flag or a flag's value.
func joinGenv(fs *flag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			return append(out, args[i:]...)
		}
		name := strings.TrimLeft(a, "-")
		if name == "genv" && i+2 < len(args) && !strings.Contains(args[i+1], "=") {
			out = append(out, "-genv="+args[i+1]+"="+args[i+2])
			i += 2
			continue
		}
		out = append(out, a)
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue // the flag package reports it
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); (!ok || !b.IsBoolFlag()) && i+1 < len(args) {
			out = append(out, args[i+1])
			i++
		}
	}
	return out
}

func parseArgs(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("amirun", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.n, "n", 1, "number of ranks (default: the hostfile's slots, or SLURM_NTASKS in a Slurm allocation, or 1)")
	fs.IntVar(&o.n, "np", 1, "same as -n")
	fs.BoolVar(&o.tagOutput, "tag-output", false, "prefix every line of output with [rank]")
	fs.DurationVar(&o.timeout, "timeout", 0, "stop the job and exit 124 after this long (0: no limit)")
	fs.DurationVar(&o.grace, "grace", 3*time.Second, "time between SIGTERM and SIGKILL when stopping ranks")
	hosts := fs.String("hosts", "", "comma-separated hosts to spread the ranks over, each name or name:slots (default: this host, no launch command; in a Slurm allocation, its nodes)")
	hostfile := fs.String("hostfile", "", "file of hosts, one a line: MPICH's \"host:slots\" or Open MPI's \"host slots=N\"")
	fs.StringVar(hostfile, "f", "", "same as --hostfile")
	fs.IntVar(&o.ppn, "ppn", 0, "ranks per host: each host takes this many in turn (default: the hosts' slots, or equal blocks)")
	fs.StringVar(&o.launch, "launch", defaultLaunch,
		"command that starts a rank on {host}; {cmd} is the command as separate arguments, {shcmd} as one shell-quoted argument; {cmd} is appended if neither appears (in a Slurm allocation: srun)")
	fs.StringVar(&o.bind, "bind", "", "host[:port] where the PMI server listens for ranks on --hosts (default: all interfaces, advertised by hostname)")
	var export, genv listFlag
	fs.Var(&export, "x", "pass VAR (as amirun has it) or VAR=value to every rank; may be repeated (Open MPI's -x)")
	fs.Var(&genv, "genv", "\"VAR value\" or VAR=value: set VAR for every rank; may be repeated (MPICH's -genv)")
	fs.StringVar(&o.bindTo, "bind-to", "none", "core: pin each rank of this host to a core of its own, in turn (sched_setaffinity); none: leave them free")
	fs.BoolVar(&o.report, "report-bindings", false, "print each rank's binding on standard error")
	fs.BoolVar(&o.keepGoing, "keep-going", false, "let the other ranks run on when one fails (default in a Slurm job run with --no-kill)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: amirun -n N [flags] prog [args...]\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(joinGenv(fs, args)); err != nil {
		return nil, err
	}
	o.prog = fs.Args()
	if len(o.prog) == 0 {
		fs.Usage()
		return nil, fmt.Errorf("no program given")
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.bindTo != "core" && o.bindTo != "none" {
		return nil, fmt.Errorf("--bind-to %q: want core or none", o.bindTo)
	}
	if o.ppn < 0 {
		return nil, fmt.Errorf("-ppn %d: want at least 1", o.ppn)
	}
	for _, v := range export {
		if strings.Contains(v, "=") {
			o.env = append(o.env, v)
			continue
		}
		val, ok := os.LookupEnv(v)
		if !ok {
			return nil, fmt.Errorf("-x %s: not set in amirun's environment", v)
		}
		o.env = append(o.env, v+"="+val)
	}
	for _, v := range genv {
		if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
			return nil, fmt.Errorf("-genv %q: want VAR value or VAR=value", v)
		}
		o.env = append(o.env, v)
	}
	var err error
	switch {
	case *hostfile != "" && *hosts != "":
		return nil, fmt.Errorf("--hostfile and --hosts: choose one")
	case *hostfile != "":
		if o.hosts, err = readHostfile(*hostfile); err != nil {
			return nil, err
		}
	case *hosts != "":
		if o.hosts, err = parseHostList(*hosts); err != nil {
			return nil, err
		}
	case os.Getenv("SLURM_JOB_NODELIST") != "":
		// Inside a Slurm allocation: its nodes, and srun to reach them.
		names, err := expandNodelist(os.Getenv("SLURM_JOB_NODELIST"))
		if err != nil {
			return nil, fmt.Errorf("SLURM_JOB_NODELIST: %v", err)
		}
		for _, n := range names {
			o.hosts = append(o.hosts, host{name: n})
		}
		if !set["launch"] {
			o.launch = slurmLaunch
		}
		if nt, err := strconv.Atoi(os.Getenv("SLURM_NTASKS")); err == nil && nt > 0 && !set["n"] && !set["np"] {
			o.n = nt
		}
	}
	if !set["n"] && !set["np"] && *hostfile != "" {
		o.n = 0
		for _, h := range o.hosts {
			o.n += h.slots
		}
	}
	if o.n < 1 || o.n > 1<<16 {
		return nil, fmt.Errorf("-n %d: want 1 to 65536 ranks", o.n)
	}
	if !set["keep-going"] {
		o.keepGoing = slurmNoKill(os.Getenv("SLURM_NO_KILL"))
	}
	o.local = isLocal(o.hosts)
	if o.grace <= 0 {
		o.grace = time.Second
	}
	return o, nil
}

// slurmNoKill reports whether SLURM_NO_KILL, as srun and sbatch set it for
// --no-kill, asks that the job outlive a failed node: set, and not "off"
// or "0".
func slurmNoKill(v string) bool {
	switch strings.ToLower(v) {
	case "", "0", "off", "no", "false":
		return false
	}
	return true
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
