// Command amiinfo prints what amigo would use in this environment: the
// effective value of every AMIGO_* setting (from the environment, else the
// default), the adapters this build has, and whether this host lets ranks
// share memory: memfd segments mapped through /proc/PID/fd, futexes between
// processes, and cross-memory attach (process_vm_readv/writev), which the
// shared-memory adapter probes toward each peer at start-up and falls back
// from when the kernel refuses it.
//
//	amiinfo            # text
//	amiinfo -json      # one JSON object
//
// The probes run between amiinfo and a copy of itself it starts, which
// plays a peer rank. The copy reads amiinfo's memory: amiinfo is not its
// descendant, as ranks started by a launcher are not each other's, so Yama's
// ptrace_scope 1 refuses cross-memory attach there exactly as it would
// between ranks.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/internal/memcopy"
	"github.com/amigo-hpc/amigo/transport/shm"
)

const probeEnv = "AMIINFO_PROBE"

type report struct {
	Settings []amigo.Setting   `json:"settings"`
	Invalid  string            `json:"invalid,omitempty"`
	Adapters []string          `json:"adapters"`
	Host     map[string]string `json:"host"`
	Probes   []probe           `json:"probes"`
	Fabric   fabric            `json:"fabric"`
}

// fabric is what the libfabric adapter finds: whether the build has it
// (the tag ofi) and the providers of this machine.
type fabric struct {
	Compiled  bool             `json:"compiled"`
	Providers []fabricProvider `json:"providers,omitempty"`
	Note      string           `json:"note,omitempty"`
}

type fabricProvider struct {
	Name   string `json:"name"`
	Domain string `json:"domain"`
	Usable bool   `json:"usable"` // meets amigo's needs (RDM, RMA, ordered sends, managed resources)
	Caps   string `json:"caps"`
	MRMode string `json:"mr_mode"`
	Order  string `json:"order"`
	Inject int    `json:"inject"`
}

type probe struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	Note string `json:"note"`
}

func main() {
	if v := os.Getenv(probeEnv); v != "" {
		os.Exit(peer(v))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, w, stderr io.Writer) int {
	fs := flag.NewFlagSet("amiinfo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	r := report{Host: map[string]string{}}
	var err error
	r.Settings, err = amigo.Settings(amigo.Config{})
	if err != nil {
		r.Invalid = err.Error()
	}
	r.Adapters = append([]string{"loop"}, amigo.ProcessAdapters()...)
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		r.Host["kernel"] = unix.ByteSliceToString(uts.Release[:])
	}
	r.Host["cpus"] = strconv.Itoa(runtime.NumCPU())
	r.Host["uid"] = strconv.Itoa(os.Getuid())
	if b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); err == nil {
		r.Host["yama_ptrace_scope"] = strings.TrimSpace(string(b))
	} else {
		r.Host["yama_ptrace_scope"] = "absent"
	}
	// Huge pages make cross-memory attach of Go memory several times
	// faster (AMIGO_SHM_HUGE). With "always", Go's heap has them already;
	// otherwise the adapter asks for them (MADV_COLLAPSE, which the kernel
	// honours whatever this mode says: the huge-collapse probe tells).
	if b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); err == nil {
		r.Host["transparent_hugepage"] = strings.TrimSpace(string(b))
	} else {
		r.Host["transparent_hugepage"] = "absent"
	}
	r.Probes = probes()
	r.Fabric = fabricReport()
	if *asJSON {
		b, _ := json.MarshalIndent(r, "", "  ")
		fmt.Fprintln(w, string(b))
		return 0
	}
	fmt.Fprintln(w, "# settings (AMIGO_* environment, else default)")
	for _, s := range r.Settings {
		src := "default"
		if _, ok := os.LookupEnv(s.Name); ok {
			src = "environment"
		}
		fmt.Fprintf(w, "%-26s %-10s %-12s %s\n", s.Name, s.Value, src, s.Doc)
	}
	if r.Invalid != "" {
		fmt.Fprintf(w, "invalid: %s\n", r.Invalid)
	}
	fmt.Fprintf(w, "\n# adapters\n%s (in-process: a rank to itself and ranks that are goroutines)\n", r.Adapters[0])
	for _, a := range r.Adapters[1:] {
		fmt.Fprintf(w, "%s\n", a)
	}
	fmt.Fprintf(w, "\n# host\n")
	for _, k := range []string{"kernel", "cpus", "uid", "yama_ptrace_scope", "transparent_hugepage"} {
		fmt.Fprintf(w, "%-26s %s\n", k, r.Host[k])
	}
	fmt.Fprintf(w, "\n# shared memory between processes (probed against a peer process)\n")
	for _, p := range r.Probes {
		st := "yes"
		if !p.OK {
			st = "NO"
		}
		fmt.Fprintf(w, "%-26s %-4s %s\n", p.Name, st, p.Note)
	}
	fmt.Fprintf(w, "\n# libfabric (adapter ofi)\n")
	if r.Fabric.Note != "" {
		fmt.Fprintf(w, "%s\n", r.Fabric.Note)
	}
	for _, p := range r.Fabric.Providers {
		st := "usable"
		if !p.Usable {
			st = "unusable"
		}
		fmt.Fprintf(w, "%-26s %-8s domain %s, inject %d, mr_mode [%s]\n%26s caps [%s]\n", p.Name, st, p.Domain, p.Inject, p.MRMode, "", p.Caps)
	}
	if r.Invalid != "" {
		return 1
	}
	return 0
}

// probes starts a peer process and tries, from each side, what the
// shared-memory adapter does between ranks.
func probes() []probe {
	var out []probe
	add := func(name string, err error, ok string) {
		p := probe{Name: name, OK: err == nil, Note: ok}
		if err != nil {
			p.Note = err.Error()
		}
		out = append(out, p)
	}
	fd, err := unix.MemfdCreate("amiinfo-probe", unix.MFD_CLOEXEC)
	if err == nil {
		err = unix.Ftruncate(fd, 4096)
	}
	var mem []byte
	if err == nil {
		mem, err = unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	}
	add("huge-collapse", shm.ProbeHuge(), "Go memory collapsed into a huge page (AMIGO_SHM_HUGE pays)")
	var movsb error
	if !memcopy.HaveMovsb {
		movsb = errors.New("no fast string move (ERMS): inline data is copied with Go's copy at every size")
	}
	add("movsb", movsb, "fast string move (ERMS): inline data from 32 KiB is copied with REP MOVSB (AMIGO_COPY)")
	add("memfd", err, "memfd_create and a shared mapping")
	if err != nil {
		return out
	}
	token := []byte(fmt.Sprintf("amiinfo-%d-%d", os.Getpid(), time.Now().UnixNano()))
	copy(mem, token)
	heap := append([]byte(nil), token...)
	self, err := os.Executable()
	if err != nil {
		add("peer-process", err, "")
		return out
	}
	arg := fmt.Sprintf("%d:%d:%x:%d", os.Getpid(), fd, uintptr(unsafe.Pointer(&heap[0])), len(heap))
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), probeEnv+"="+arg)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		add("peer-process", err, "")
		return out
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	sc := bufio.NewScanner(stdout)
	// The peer reports its own probes first, then where its bytes are.
	var peerPID int
	var peerAddr uint64
	var peerLen int
scan:
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 3)
		switch {
		case len(f) == 3 && f[0] == "probe":
			p := probe{Name: f[1]}
			p.OK = strings.HasPrefix(f[2], "ok")
			p.Note = strings.TrimPrefix(strings.TrimPrefix(f[2], "ok"), " ")
			out = append(out, p)
		case len(f) == 3 && f[0] == "peer":
			peerPID, _ = strconv.Atoi(f[1])
			fmt.Sscanf(f[2], "%x:%d", &peerAddr, &peerLen)
		}
		if peerPID != 0 {
			break scan
		}
	}
	if peerPID == 0 {
		add("peer-process", errors.New("the peer reported nothing"), "")
		return out
	}
	// Cross-memory attach from this process to the peer (its parent, so
	// Yama's scope 1 allows this direction; the peer tried the other).
	buf := make([]byte, peerLen)
	err = shm.ProbeCMA(peerPID, uintptr(peerAddr), peerLen)
	if err == nil {
		c := readCMA(peerPID, peerAddr, buf)
		if c != nil || !bytes.HasPrefix(buf, []byte("amiinfo-peer")) {
			err = fmt.Errorf("read the wrong bytes (%v)", c)
		}
	}
	add("cma-child", err, "process_vm_readv of a child process (what a launcher's parent could do)")
	// Futex wake across processes: the peer waits on the first word of the
	// segment; we store 1 and wake it.
	fmt.Fprintln(stdin, "futex")
	time.Sleep(10 * time.Millisecond)
	w := (*uint32)(unsafe.Pointer(&mem[64]))
	*w = 1
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), 1 /* FUTEX_WAKE */, 1, 0, 0, 0)
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 3)
		if len(f) == 3 && f[0] == "probe" {
			p := probe{Name: f[1], OK: strings.HasPrefix(f[2], "ok"), Note: strings.TrimPrefix(strings.TrimPrefix(f[2], "ok"), " ")}
			out = append(out, p)
			if p.Name == "futex-shared" {
				break
			}
		}
	}
	return out
}

func readCMA(pid int, addr uint64, buf []byte) error {
	l := []unix.Iovec{{Base: &buf[0]}}
	l[0].SetLen(len(buf))
	r := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(buf)}}
	_, err := unix.ProcessVMReadv(pid, l, r, 0)
	return err
}

// peer is the probe process: it maps its parent's segment through /proc,
// reads its parent's memory by cross-memory attach (the direction a rank
// uses toward a sibling: the parent is not its descendant), and sleeps on
// a futex its parent wakes.
func peer(arg string) int {
	var ppid, fd, n int
	var addr uint64
	if _, err := fmt.Sscanf(strings.ReplaceAll(arg, ":", " "), "%d %d %x %d", &ppid, &fd, &addr, &n); err != nil {
		fmt.Fprintln(os.Stderr, "amiinfo: bad probe argument", arg)
		return 2
	}
	say := func(name string, err error, ok string) {
		if err != nil {
			fmt.Printf("probe %s %v\n", name, err)
		} else {
			fmt.Printf("probe %s ok %s\n", name, ok)
		}
	}
	path := fmt.Sprintf("/proc/%d/fd/%d", ppid, fd)
	var mem []byte
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err == nil {
		mem, err = unix.Mmap(int(f.Fd()), 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		f.Close()
	}
	if err == nil && !bytes.HasPrefix(mem, []byte("amiinfo-")) {
		err = errors.New("mapped the wrong bytes")
	}
	say("segment-map", err, "open "+path+" and map it, as ranks map each other's segments")
	buf := make([]byte, n)
	err = shm.ProbeCMA(ppid, uintptr(addr), n)
	if err == nil {
		if err = readCMA(ppid, addr, buf); err == nil && !bytes.HasPrefix(buf, []byte("amiinfo-")) {
			err = errors.New("read the wrong bytes")
		}
	}
	if err != nil && errors.Is(err, unix.EPERM) {
		err = fmt.Errorf("%w: refused (Yama ptrace_scope, seccomp, or another user); the adapter falls back to the pipelined copy", err)
	}
	say("cma-ranks", err, "process_vm_readv of a process that is not a descendant, as between ranks")
	mine := []byte("amiinfo-peer-bytes")
	fmt.Printf("peer %d %x:%d\n", os.Getpid(), uintptr(unsafe.Pointer(&mine[0])), len(mine))
	in := bufio.NewScanner(os.Stdin)
	if in.Scan() && in.Text() == "futex" && mem != nil {
		w := (*uint32)(unsafe.Pointer(&mem[64]))
		start := time.Now()
		ts := unix.NsecToTimespec(int64(2 * time.Second))
		for *w == 0 && time.Since(start) < 2*time.Second {
			// FUTEX_WAIT without the private flag, on a shared mapping.
			unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), 0, 0, uintptr(unsafe.Pointer(&ts)), 0, 0)
		}
		if *w == 1 {
			say("futex-shared", nil, "woken by the other process through the shared word")
		} else {
			say("futex-shared", errors.New("not woken within 2s"), "")
		}
	}
	runtime.KeepAlive(mine)
	in.Scan()
	return 0
}
