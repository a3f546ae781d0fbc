// Package launch starts the ranks of a job on this host as child processes
// and serves them PMI-1 over inherited sockets, as amirun does, for commands
// and tests that start their own ranks (amibench run bare, multi-process
// tests that re-run their test binary as ranks).
package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"encoding/hex"

	"github.com/amigo-hpc/amigo/bootstrap"
	"github.com/amigo-hpc/amigo/bootstrap/pmiserver"
)

// Options describe a job.
type Options struct {
	// N is the number of ranks.
	N int
	// Argv is the program and its arguments, the same for every rank.
	Argv []string
	// Env is added to this process's environment for every rank.
	Env []string
	// RankEnv, if set, returns variables for one rank only.
	RankEnv func(rank int) []string
	// Output returns where a rank's standard output and error go; nil
	// writers (or a nil Output) discard them.
	Output func(rank int) (stdout, stderr io.Writer)
	// Files are inherited by every rank as descriptors 4, 5, ... (3 is the
	// PMI socket).
	Files []*os.File
	// Grace is how long ranks have between SIGTERM and SIGKILL when the job
	// is stopped (default 2s).
	Grace time.Duration
	// KeepGoing lets the other ranks run on when one fails, as amirun
	// --keep-going does: the ranks get AMIGO_KEEP_GOING=1, and each rank
	// that fails is published to the others (bootstrap.LostRanks). Wait
	// then reports every failed rank. Tests of rank failures use it.
	KeepGoing bool
	// Nodes, if set, is the host index of each rank that the launcher
	// reports (PMI_process_mapping), so that a test can spread a job
	// over hosts it does not have; nil puts every rank on host 0.
	Nodes []int
	// BindCores pins rank r to the r-th core this process may use
	// (sched_setaffinity before the rank starts, as amirun --bind-to core
	// does), if there are at least N cores; with fewer it leaves the
	// ranks free, as Open MPI does for more ranks than cores.
	BindCores bool
}

// ExitErrors reports the ranks that failed.
type ExitErrors struct {
	Ranks []int
	Errs  []error
}

func (e *ExitErrors) Error() string {
	return errors.Join(e.Errs...).Error()
}

// Job is a running job.
type Job struct {
	opts  Options
	srv   *pmiserver.Server
	ranks []*rank
	exits chan exit
	mu    sync.Mutex
	done  bool
}

type rank struct {
	cmd  *exec.Cmd
	conn net.Conn
	exit *exit
}

type exit struct {
	rank  int
	state *os.ProcessState
	err   error
}

// Start starts the ranks.
func Start(opts Options) (*Job, error) {
	if opts.N < 1 || len(opts.Argv) == 0 {
		return nil, fmt.Errorf("launch: %d ranks of %q", opts.N, opts.Argv)
	}
	if opts.Grace <= 0 {
		opts.Grace = 2 * time.Second
	}
	nodes := opts.Nodes
	if nodes == nil {
		nodes = make([]int, opts.N)
	}
	if len(nodes) != opts.N {
		return nil, fmt.Errorf("launch: %d host indices for %d ranks", len(nodes), opts.N)
	}
	srv, err := pmiserver.New(pmiserver.Config{Size: opts.N, ProcessMapping: pmiserver.ProcessMapping(nodes)})
	if err != nil {
		return nil, err
	}
	j := &Job{opts: opts, srv: srv, exits: make(chan exit, opts.N)}
	secret := hex.EncodeToString(bootstrap.NewSecret())
	var cores [][]int
	if opts.BindCores {
		if cs, err := Cores(); err == nil && len(cs) >= opts.N {
			cores = cs
		}
	}
	for r := 0; r < opts.N; r++ {
		var cpus []int
		if cores != nil {
			cpus = cores[r]
		}
		if err := j.start(r, secret, cpus); err != nil {
			j.Kill()
			return nil, fmt.Errorf("launch: rank %d: %w", r, err)
		}
	}
	return j, nil
}

func (j *Job) start(r int, secret string, cpus []int) error {
	o := j.opts
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	mine := os.NewFile(uintptr(fds[0]), "pmi")
	conn, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		syscall.Close(fds[1])
		return err
	}
	theirs := os.NewFile(uintptr(fds[1]), "pmi-rank")
	defer theirs.Close()
	cmd := exec.Command(o.Argv[0], o.Argv[1:]...)
	cmd.Env = append(os.Environ(), o.Env...)
	if o.RankEnv != nil {
		cmd.Env = append(cmd.Env, o.RankEnv(r)...)
	}
	cmd.Env = append(cmd.Env,
		"PMI_FD=3", "PMI_RANK="+strconv.Itoa(r), "PMI_SIZE="+strconv.Itoa(o.N),
		bootstrap.SecretEnv+"="+secret)
	if o.KeepGoing {
		cmd.Env = append(cmd.Env, "AMIGO_KEEP_GOING=1")
	}
	cmd.ExtraFiles = append([]*os.File{theirs}, o.Files...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if o.Output != nil {
		cmd.Stdout, cmd.Stderr = o.Output(r)
	}
	if err := StartBound(cmd, cpus); err != nil {
		conn.Close()
		return err
	}
	rk := &rank{cmd: cmd, conn: conn}
	j.ranks = append(j.ranks, rk)
	go j.srv.ServeConn(conn, r)
	go func() {
		err := cmd.Wait()
		conn.Close()
		j.exits <- exit{rank: r, state: cmd.ProcessState, err: err}
	}()
	return nil
}

// Pid returns the process id of rank.
func (j *Job) Pid(rank int) int { return j.ranks[rank].cmd.Process.Pid }

// Lose reports rank lost to the other ranks (bootstrap.LostRanks), as Wait
// does for a rank that fails under KeepGoing: a launcher that gives up on a
// rank it cannot reach.
func (j *Job) Lose(rank int) { j.srv.Lost(rank) }

// Wait waits until every rank exited. When a rank fails (exits non-zero,
// is killed) or ctx ends, it stops the others and returns an error that
// names the rank; ranks stopped because of it are not reported.
func (j *Job) Wait(ctx context.Context) error {
	var first error
	var all ExitErrors
	live := len(j.ranks)
	var kill <-chan time.Time
	stopping := false
	stop := func() {
		if !stopping {
			stopping = true
			j.signal(syscall.SIGTERM)
			kill = time.After(j.opts.Grace)
		}
	}
	done := ctx.Done()
	for live > 0 {
		select {
		case e := <-j.exits:
			live--
			j.ranks[e.rank].exit = &e
			if e.state == nil || !e.state.Success() {
				err := fmt.Errorf("rank %d (pid %d): %s", e.rank, j.Pid(e.rank), describe(e))
				if j.opts.KeepGoing {
					all.Ranks = append(all.Ranks, e.rank)
					all.Errs = append(all.Errs, err)
					j.srv.Lost(e.rank) // the others learn of it
					continue
				}
				if first == nil && !stopping {
					first = &ExitErrors{Ranks: []int{e.rank}, Errs: []error{err}}
				}
				stop()
			}
		case <-done:
			done = nil
			if first == nil {
				first = fmt.Errorf("job stopped: %w", ctx.Err())
			}
			stop()
		case <-kill:
			j.signal(syscall.SIGKILL)
			kill = nil
		}
	}
	j.srv.Close()
	j.mu.Lock()
	j.done = true
	j.mu.Unlock()
	if first == nil && len(all.Ranks) > 0 {
		return &all
	}
	return first
}

func describe(e exit) string {
	if e.state == nil {
		return e.err.Error()
	}
	if ws, ok := e.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("killed by signal %d (%v)", int(ws.Signal()), ws.Signal())
	}
	return fmt.Sprintf("exited with status %d", e.state.ExitCode())
}

func (j *Job) signal(sig syscall.Signal) {
	for _, rk := range j.ranks {
		if rk.exit == nil && rk.cmd.Process != nil {
			_ = syscall.Kill(-rk.cmd.Process.Pid, sig)
		}
	}
}

// Kill stops every rank at once.
func (j *Job) Kill() {
	for _, rk := range j.ranks {
		if rk.cmd.Process != nil {
			_ = syscall.Kill(-rk.cmd.Process.Pid, syscall.SIGKILL)
		}
	}
}

// ErrNotRank is returned by callers that expected to run as a rank.
var ErrNotRank = errors.New("not started as a rank (no PMI_FD or PMI_PORT)")

// InRank reports whether this process was started by a PMI launcher.
func InRank() bool { return os.Getenv("PMI_FD") != "" || os.Getenv("PMI_PORT") != "" }
