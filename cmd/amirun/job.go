package main

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/amigo-hpc/amigo/bootstrap"
	"github.com/amigo-hpc/amigo/bootstrap/pmiserver"
	"github.com/amigo-hpc/amigo/internal/launch"
)

// job is one run of amirun: the ranks, the PMI server, and the event loop
// that decides the exit status.
type job struct {
	o              *options
	stdout, stderr io.Writer
	outMu          sync.Mutex // one line at a time on stdout and stderr

	srv    *pmiserver.Server
	ranks  []*rank
	events chan event
	copies sync.WaitGroup // output copiers
}

type rank struct {
	r      int
	host   string // where it runs, for messages
	cmd    *exec.Cmd
	exited bool
	toSrv  net.Conn // launcher end of PMI_FD (local ranks)
}

type eventKind int

const (
	evExit eventKind = iota
	evAbort
)

type event struct {
	kind  eventKind
	rank  int
	code  int
	msg   string
	state *os.ProcessState
	err   error
}

func newJob(o *options, stdout, stderr io.Writer) *job {
	return &job{o: o, stdout: stdout, stderr: stderr, events: make(chan event, 4*o.n+16)}
}

func (j *job) logf(format string, args ...any) {
	j.outMu.Lock()
	defer j.outMu.Unlock()
	fmt.Fprintf(j.stderr, "amirun: "+format+"\n", args...)
}

// prSetChildSubreaper makes orphaned descendants of amirun become its
// children instead of init's, so that the final sweep can find them.
const prSetChildSubreaper = 36

func (j *job) run() int {
	o := j.o
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		j.logf("warning: cannot become a child subreaper: %v", e)
	}
	sigc := make(chan os.Signal, 4)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigc)

	secret := hex.EncodeToString(bootstrap.NewSecret())
	hostOf := place(o.n, o.hosts, o.ppn)
	if o.local {
		hostOf = make([]int, o.n) // names of this machine: one node
	}
	binds, err := j.bindings(hostOf)
	if err != nil {
		j.logf("--bind-to %s: %v", o.bindTo, err)
		return 2
	}
	srv, err := pmiserver.New(pmiserver.Config{
		Size:           o.n,
		ProcessMapping: pmiserver.ProcessMapping(hostOf),
		OnAbort: func(r, code int, msg string) {
			select {
			case j.events <- event{kind: evAbort, rank: r, code: code, msg: msg}:
			default:
			}
		},
		Logf: func(format string, args ...any) { j.logf(format, args...) },
	})
	if err != nil {
		j.logf("%v", err)
		return 2
	}
	j.srv = srv
	defer srv.Close()

	var portEnv string
	if !o.local {
		l, adv, err := listen(o.bind)
		if err != nil {
			j.logf("PMI server: %v", err)
			return 2
		}
		go srv.Serve(l)
		portEnv = adv
	}

	code := -1
	failed := func(c int, format string, args ...any) {
		if code < 0 {
			code = c
			j.logf(format, args...)
		}
	}
	var killTimer <-chan time.Time
	stopping := false
	beginStop := func() {
		if !stopping {
			stopping = true
			j.signalAll(syscall.SIGTERM)
			killTimer = time.After(o.grace)
		}
	}

	live := 0
	for r := range o.n {
		rk, err := j.start(r, hostOf[r], binds[r], secret, portEnv)
		if err != nil {
			st := 126
			if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
				st = 127
			}
			failed(st, "rank %d on %s: %v", r, j.hostName(hostOf[r]), err)
			beginStop()
			break
		}
		j.ranks = append(j.ranks, rk)
		live++
	}

	var timeoutC <-chan time.Time
	if o.timeout > 0 {
		timeoutC = time.After(o.timeout)
	}
	for live > 0 {
		select {
		case ev := <-j.events:
			switch ev.kind {
			case evExit:
				live--
				j.ranks[ev.rank].exited = true
				if ev.rank < len(j.ranks) && j.ranks[ev.rank].toSrv != nil {
					j.ranks[ev.rank].toSrv.Close()
				}
				st, how := status(ev.state, ev.err)
				switch {
				case (st != 0 || live > 0 && srv.Connected(ev.rank) && !srv.Finalized(ev.rank)) && o.keepGoing && !stopping:
					if st == 0 {
						st, how = 1, "exited without PMI finalize"
					}
					// The first failure sets the status; each is told.
					if code < 0 {
						code = st
					}
					j.logf("rank %d on %s %s; the job goes on (--keep-going)", ev.rank, j.ranks[ev.rank].host, how)
					srv.Lost(ev.rank) // the others learn of it
				case st != 0:
					failed(st, "rank %d on %s %s; stopping the job", ev.rank, j.ranks[ev.rank].host, how)
					beginStop()
				case live > 0 && srv.Connected(ev.rank) && !srv.Finalized(ev.rank):
					failed(1, "rank %d on %s exited without PMI finalize while other ranks run; stopping the job", ev.rank, j.ranks[ev.rank].host)
					beginStop()
				}
			case evAbort:
				failed(max(ev.code, 1), "rank %d on %s aborted the job (code %d) %s", ev.rank, j.ranks[ev.rank].host, ev.code, ev.msg)
				beginStop()
			}
		case sig := <-sigc:
			s := sig.(syscall.Signal)
			failed(128+int(s), "received %v; forwarding it to the ranks", s)
			j.signalAll(s)
			if killTimer == nil {
				stopping = true
				killTimer = time.After(o.grace)
			}
		case <-timeoutC:
			failed(124, "timeout after %v; stopping the job", o.timeout)
			beginStop()
		case <-killTimer:
			j.signalAll(syscall.SIGKILL)
			killTimer = nil
		}
	}
	srv.Close()
	if n := sweep(time.Now().Add(o.grace + time.Second)); n > 0 {
		j.logf("stopped %d leftover process(es) of the ranks", n)
	}
	// The copiers end when the last writer of each pipe is gone; don't let
	// a descendant that escaped (a new session daemon) hold amirun forever.
	done := make(chan struct{})
	go func() { j.copies.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(o.grace):
	}
	return max(code, 0)
}

// status is the exit status amirun reports for a rank, and a description.
func status(ps *os.ProcessState, err error) (int, string) {
	if ps == nil {
		return 1, fmt.Sprintf("could not be waited for: %v", err)
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	switch {
	case ok && ws.Signaled():
		return 128 + int(ws.Signal()), fmt.Sprintf("was killed by %v", ws.Signal())
	case ps.ExitCode() != 0:
		return ps.ExitCode(), fmt.Sprintf("exited with status %d", ps.ExitCode())
	}
	return 0, "exited"
}

// signalAll sends sig to the process group of every rank not yet reaped
// (a reaped leader's group id could in principle be reused).
func (j *job) signalAll(sig syscall.Signal) {
	for _, rk := range j.ranks {
		if !rk.exited && rk.cmd.Process != nil {
			syscall.Kill(-rk.cmd.Process.Pid, sig)
		}
	}
}

// listen opens the PMI_PORT listener and returns the address ranks dial.
func listen(bind string) (net.Listener, string, error) {
	addr := bind
	if addr == "" {
		addr = ":0"
	} else if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, "0")
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	host, _, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if host, err = os.Hostname(); err != nil {
			l.Close()
			return nil, "", err
		}
	}
	port := l.Addr().(*net.TCPAddr).Port
	return l, net.JoinHostPort(host, strconv.Itoa(port)), nil
}

// hostName names host h of the job for messages: its name, or this
// machine's for a job on this host.
func (j *job) hostName(h int) string {
	if len(j.o.hosts) > 0 && !j.o.local {
		return j.o.hosts[h].name
	}
	me, err := os.Hostname()
	if err != nil {
		return "localhost"
	}
	return me
}

// bindings returns the processors of every rank with --bind-to core:
// the ranks of one host take amirun's cores in turn, the k-th rank of a
// host the k-th core (modulo their number). The cores are this host's,
// so a rank started elsewhere (ssh) is bound only if its launch command
// starts it in place (ip netns exec, env) on this host. With
// --report-bindings each rank's binding is printed.
func (j *job) bindings(hostOf []int) ([][]int, error) {
	out := make([][]int, len(hostOf))
	if j.o.bindTo != "core" {
		if j.o.report {
			for r := range hostOf {
				j.logf("rank %d on %s: not bound", r, j.hostName(hostOf[r]))
			}
		}
		return out, nil
	}
	cs, err := launch.Cores()
	if err != nil {
		return nil, err
	}
	next := map[int]int{}
	over := false
	for r, h := range hostOf {
		k := next[h]
		next[h]++
		over = over || k >= len(cs)
		out[r] = cs[k%len(cs)]
		if j.o.report {
			j.logf("rank %d on %s bound to core %d: processors %s", r, j.hostName(h), k%len(cs), launch.CPUList(out[r]))
		}
	}
	if over {
		j.logf("warning: more ranks on a host than the %d cores amirun may use; cores are shared", len(cs))
	}
	return out, nil
}

// start launches rank r on host h, bound to cpus if any.
func (j *job) start(r, h int, cpus []int, secret, portEnv string) (*rank, error) {
	o := j.o
	rk := &rank{r: r, host: j.hostName(h)}
	pmiEnv := []string{
		"PMI_RANK=" + strconv.Itoa(r),
		"PMI_SIZE=" + strconv.Itoa(o.n),
		bootstrap.SecretEnv + "=" + secret,
	}
	if o.keepGoing {
		pmiEnv = append(pmiEnv, "AMIGO_KEEP_GOING=1")
	}
	// -x and -genv first: the PMI variables are amirun's to set.
	pmiEnv = append(append([]string{}, o.env...), pmiEnv...)
	var extra []*os.File
	var argv []string
	if o.local {
		// The rank inherits one end of a socket pair as descriptor 3.
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		mine := os.NewFile(uintptr(fds[0]), "pmi")
		c, err := net.FileConn(mine)
		mine.Close()
		if err != nil {
			syscall.Close(fds[1])
			return nil, err
		}
		rk.toSrv = c
		theirs := os.NewFile(uintptr(fds[1]), "pmi-rank")
		defer theirs.Close()
		extra = []*os.File{theirs}
		pmiEnv = append(pmiEnv, "PMI_FD=3")
		argv = o.prog
	} else {
		pmiEnv = append(pmiEnv, "PMI_PORT="+portEnv, "PMI_ID="+strconv.Itoa(r))
		argv = launchArgv(o.launch, o.hosts[h].name, pmiEnv, o.prog)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), pmiEnv...)
	cmd.ExtraFiles = extra
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var closeAfterStart []*os.File
	for i, dst := range []io.Writer{j.stdout, j.stderr} {
		if f, ok := dst.(*os.File); ok && !o.tagOutput {
			if i == 0 {
				cmd.Stdout = f
			} else {
				cmd.Stderr = f
			}
			continue
		}
		// Our own pipe, so that Wait does not wait for the output of
		// descendants that outlive the rank.
		pr, pw, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		if i == 0 {
			cmd.Stdout = pw
		} else {
			cmd.Stderr = pw
		}
		closeAfterStart = append(closeAfterStart, pw)
		prefix := ""
		if o.tagOutput {
			prefix = "[" + strconv.Itoa(r) + "] "
		}
		j.copies.Add(1)
		go j.copyLines(pr, dst, prefix)
	}
	err := launch.StartBound(cmd, cpus)
	for _, f := range closeAfterStart {
		f.Close()
	}
	if err != nil {
		if rk.toSrv != nil {
			rk.toSrv.Close()
		}
		return nil, err
	}
	rk.cmd = cmd
	if rk.toSrv != nil {
		go j.srv.ServeConn(rk.toSrv, r)
	}
	go func() {
		err := cmd.Wait()
		j.events <- event{kind: evExit, rank: r, state: cmd.ProcessState, err: err}
	}()
	return rk, nil
}

// copyLines copies r to w a line at a time, each line prefixed.
func (j *job) copyLines(r *os.File, w io.Writer, prefix string) {
	defer j.copies.Done()
	defer r.Close()
	br := bufio.NewReaderSize(r, 64<<10)
	atStart := true
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			j.outMu.Lock()
			if atStart {
				io.WriteString(w, prefix)
			}
			w.Write(line)
			atStart = line[len(line)-1] == '\n'
			if err != nil && err != bufio.ErrBufferFull && !atStart {
				io.WriteString(w, "\n")
			}
			j.outMu.Unlock()
		}
		if err != nil && err != bufio.ErrBufferFull {
			return
		}
	}
}

// launchArgv expands the launch template for one rank on host. {cmd}
// becomes the program's argv, the PMI variables reaching it through the
// environment (a local wrapper such as "ip netns exec" passes it on);
// {shcmd} becomes one shell-quoted string that sets them with env, for
// remote shells such as ssh, which pass no environment.
func launchArgv(tmpl, host string, env, prog []string) []string {
	var out []string
	placed := false
	for _, f := range strings.Fields(tmpl) {
		switch f {
		case "{cmd}":
			out = append(out, prog...)
			placed = true
		case "{shcmd}":
			words := append(append([]string{"env"}, env...), prog...)
			for i, w := range words {
				words[i] = shellQuote(w)
			}
			out = append(out, strings.Join(words, " "))
			placed = true
		default:
			out = append(out, strings.ReplaceAll(f, "{host}", host))
		}
	}
	if !placed {
		out = append(out, prog...)
	}
	return out
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,@%+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// sweep stops every remaining child of this process (orphans reparented to
// us as subreaper), reaping them, until none is left or deadline passes.
// It returns how many it signalled. It must run only after every rank's
// Wait has returned, or it could reap a rank's status.
func sweep(deadline time.Time) int {
	n := 0
	for time.Now().Before(deadline) {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
		kids := children(os.Getpid())
		if len(kids) == 0 {
			return n
		}
		for _, k := range kids {
			if syscall.Kill(k, syscall.SIGKILL) == nil {
				n++
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return n
}

// children lists the pids whose parent is ppid, from /proc.
func children(ppid int) []int {
	d, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range d {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// "pid (comm) state ppid ...": comm may hold spaces and parens.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 2 {
			if p, _ := strconv.Atoi(f[1]); p == ppid {
				out = append(out, pid)
			}
		}
	}
	return out
}
