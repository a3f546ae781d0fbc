package bootstrap

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/bootstrap/internal/pmiwire"
	"github.com/amigo-hpc/amigo/bootstrap/pmiserver"
)

// fake is a scripted launcher on the other end of a rank's PMI_FD. It
// records what the client sent, one entry per message, and answers with
// reply(msg), which may return "" for no reply, or raw bytes to send.
type fake struct {
	t     testing.TB
	c     net.Conn
	mu    sync.Mutex
	got   []string
	reads []int // size of each Read that delivered the init line
	done  chan struct{}
}

// startFake serves one rank. v2 says whether to expect PMI-2 frames after
// the init line. reply gets each message (PMI-1 line without '\n', or PMI-2
// body) and returns the raw bytes to answer with.
func startFake(t testing.TB, v2 bool, reply func(msg string) string) (*fake, int) {
	c, fd := socketPair(t)
	f := &fake{t: t, c: c, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		defer c.Close()
		// The init line must arrive in one write: read it with one Read.
		buf := make([]byte, 4096)
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		first := strings.TrimSuffix(string(buf[:n]), "\n")
		f.record(first)
		f.mu.Lock()
		f.reads = append(f.reads, n)
		f.mu.Unlock()
		if r := reply(first); r != "" {
			c.Write([]byte(r))
		}
		br := bufio.NewReader(c)
		for {
			var msg string
			if v2 && strings.Contains(first, "pmi_version=2") {
				var h [6]byte
				if _, err := io.ReadFull(br, h[:]); err != nil {
					return
				}
				l, err := strconv.Atoi(strings.TrimSpace(string(h[:])))
				if err != nil {
					t.Errorf("fake launcher: bad header %q", h)
					return
				}
				b := make([]byte, l)
				if _, err := io.ReadFull(br, b); err != nil {
					return
				}
				msg = string(b)
			} else {
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				msg = strings.TrimSuffix(line, "\n")
			}
			f.record(msg)
			if r := reply(msg); r != "" {
				if _, err := c.Write([]byte(r)); err != nil {
					return
				}
			}
		}
	}()
	return f, fd
}

func (f *fake) record(m string) {
	f.mu.Lock()
	f.got = append(f.got, m)
	f.mu.Unlock()
}

func (f *fake) sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.got...)
}

// slurm2 frames a PMI-2 reply the way Slurm does: length left-justified.
func slurm2(body string) string { return fmt.Sprintf("%-6d%s", len(body), body) }

// hydra2 frames it the way Hydra does: right-justified.
func hydra2(body string) string { return fmt.Sprintf("%6d%s", len(body), body) }

func pmi2Env(fd int, rank, size int) map[string]string {
	return map[string]string{"PMI_FD": strconv.Itoa(fd), "PMI_RANK": strconv.Itoa(rank),
		"PMI_SIZE": strconv.Itoa(size), "PMI_JOBID": "2.0"}
}

// slurmReplies answers like Slurm 22.05's PMI-2 server for rank 0 of 4,
// from the transcript in shared/slurm/README.md: left-justified lengths, rc
// first, puts invisible until the fence, no reply to unknown commands.
func slurmReplies() func(string) string {
	var mu sync.Mutex
	pending, kvs := map[string]string{}, map[string]string{}
	return func(m string) string {
		mu.Lock()
		defer mu.Unlock()
		if m == "cmd=init pmi_version=2 pmi_subversion=0" {
			return "cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0\n"
		}
		msg, err := pmiwire.ParseBody([]byte(m))
		if err != nil {
			return ""
		}
		switch msg.Cmd {
		case "fullinit":
			return slurm2("cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank=0;size=4;appnum=-1;debugged=FALSE;pmiverbose=FALSE;")
		case "job-getid":
			return slurm2("cmd=job-getid-response;rc=0;jobid=2.0;")
		case "info-getjobattr":
			return slurm2("cmd=info-getjobattr-response;rc=0;found=TRUE;value=(vector,(0,1,4));")
		case "kvs-put":
			k, _ := msg.Get("key")
			v, _ := msg.Get("value")
			pending[k] = v
			return slurm2("cmd=kvs-put-response;rc=0;")
		case "kvs-fence":
			for k, v := range pending {
				kvs[k] = v
			}
			// The other three ranks' values, as if they had put them.
			for r := 1; r < 4; r++ {
				kvs["addr/"+strconv.Itoa(r)] = "1:" + string(pmiwire.AppendValue(nil, []byte("addr-of-rank-"+strconv.Itoa(r))))
			}
			return slurm2("cmd=kvs-fence-response;rc=0;")
		case "kvs-get":
			k, _ := msg.Get("key")
			if v, ok := kvs[k]; ok {
				return slurm2("cmd=kvs-get-response;rc=0;found=TRUE;value=" + v + ";")
			}
			return slurm2("cmd=kvs-get-response;rc=0;found=FALSE;")
		case "finalize":
			return slurm2("cmd=finalize-response;rc=0;")
		}
		return "" // Slurm does not answer unknown commands
	}
}

// TestSlurmTranscript replays rank 0's conversation with Slurm's PMI-2
// server and checks what the client sends, message by message.
func TestSlurmTranscript(t *testing.T) {
	f, fd := startFake(t, true, slurmReplies())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	j, err := OpenConfig(ctx, Config{Getenv: envMap(pmi2Env(fd, 0, 4))})
	if err != nil {
		t.Fatal(err)
	}
	if j.Rank() != 0 || j.Size() != 4 || j.Node(3) != 0 {
		t.Fatalf("rank %d size %d node(3) %d", j.Rank(), j.Size(), j.Node(3))
	}
	if err := j.Put("addr", []byte("addr-of-rank-0")); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Get(ctx, 0, "addr"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("own put visible before the fence: %v", err)
	}
	if err := j.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	for r := range 4 {
		v, err := j.Get(ctx, r, "addr")
		if err != nil || string(v) != "addr-of-rank-"+strconv.Itoa(r) {
			t.Fatalf("rank %d addr: %q, %v", r, v, err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	<-f.done
	got := f.sent()
	if f.reads[0] != len(pmi2Init) {
		t.Errorf("init line arrived in a read of %d bytes, want exactly the %d-byte line", f.reads[0], len(pmi2Init))
	}
	// The secret is random: check its shape, then drop it from the comparison.
	want := []string{
		"cmd=init pmi_version=2 pmi_subversion=0",
		"cmd=fullinit;pmijobid=2.0;pmirank=0;threaded=FALSE;",
		"cmd=job-getid;",
		"cmd=info-getjobattr;key=PMI_process_mapping;",
		"SECRET",
		"cmd=kvs-fence;",
		"cmd=kvs-put;key=addr/0;value=1:" + string(pmiwire.AppendValue(nil, []byte("addr-of-rank-0"))) + ";",
		"cmd=kvs-get;jobid=2.0;srcid=-1;key=addr/0;",
		"cmd=kvs-fence;",
		"cmd=kvs-get;jobid=2.0;srcid=-1;key=addr/0;",
		"cmd=kvs-get;jobid=2.0;srcid=-1;key=addr/1;",
		"cmd=kvs-get;jobid=2.0;srcid=-1;key=addr/2;",
		"cmd=kvs-get;jobid=2.0;srcid=-1;key=addr/3;",
		"cmd=finalize;",
	}
	if len(got) > 4 && strings.HasPrefix(got[4], "cmd=kvs-put;key=_amigo.secret/0;value=1:") && len(got[4]) == len("cmd=kvs-put;key=_amigo.secret/0;value=1:;")+43 {
		got[4] = "SECRET"
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("client sent:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestUnknownCommandGetsNoReply: Slurm ignores commands it does not know; a
// client waiting for the answer must give up at its deadline, not hang.
func TestUnknownCommandGetsNoReply(t *testing.T) {
	replies := slurmReplies()
	_, fd := startFake(t, true, func(m string) string {
		if strings.HasPrefix(m, "cmd=info-getjobattr;") {
			return "" // as if Slurm did not know it
		}
		return replies(m)
	})
	start := time.Now()
	_, err := OpenConfig(context.Background(), Config{Getenv: envMap(pmi2Env(fd, 0, 4)), RequestTimeout: 300 * time.Millisecond})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("took %v", d)
	}
	t.Log(err)
}

// TestMalformedReplies: each broken reply gives a clear error quickly.
func TestMalformedReplies(t *testing.T) {
	type tc struct {
		name  string
		v2    bool
		reply func(string) string
		want  error
	}
	pmi1 := func(bad map[string]string) func(string) string {
		return func(m string) string {
			cmd := strings.Fields(m)[0]
			if r, ok := bad[cmd]; ok {
				return r
			}
			switch cmd {
			case "cmd=init":
				return "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n"
			case "cmd=get_maxes":
				return "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n"
			case "cmd=get_my_kvsname":
				return "cmd=my_kvsname kvsname=kvs_1\n"
			case "cmd=get":
				return "cmd=get_result rc=0 msg=success value=(vector,(0,1,1))\n"
			}
			return ""
		}
	}
	pmi2 := func(bad map[string]string) func(string) string {
		good := slurmReplies()
		return func(m string) string {
			cmd, _, _ := strings.Cut(m, ";")
			if r, ok := bad[cmd]; ok {
				return r
			}
			return good(m)
		}
	}
	cases := []tc{
		{"pmi1-garbage", false, pmi1(map[string]string{"cmd=init": "garbage\n"}), ErrProtocol},
		{"pmi1-wrong-cmd", false, pmi1(map[string]string{"cmd=get_maxes": "cmd=barrier_out\n"}), ErrProtocol},
		{"pmi1-rc", false, pmi1(map[string]string{"cmd=init": "cmd=response_to_init rc=-1 msg=nope\n"}), ErrProtocol},
		{"pmi1-maxes-missing", false, pmi1(map[string]string{"cmd=get_maxes": "cmd=maxes kvsname_max=256\n"}), ErrProtocol},
		{"pmi1-maxes-nan", false, pmi1(map[string]string{"cmd=get_maxes": "cmd=maxes keylen_max=x vallen_max=1024\n"}), ErrProtocol},
		{"pmi1-no-kvsname", false, pmi1(map[string]string{"cmd=get_my_kvsname": "cmd=my_kvsname\n"}), ErrProtocol},
		{"pmi1-bad-mapping", false, pmi1(map[string]string{"cmd=get": "cmd=get_result rc=0 value=(vector,(0,0,4))\n"}), ErrProtocol},
		{"pmi1-endless-line", false, pmi1(map[string]string{"cmd=init": "cmd=response_to_init " + strings.Repeat("x", 70000)}), ErrProtocol},
		{"pmi1-eof-mid-line", false, pmi1(map[string]string{"cmd=get_maxes": "cmd=maxes kvsname_max=256\x00"}), ErrLauncherGone},
		{"pmi1-nul", false, pmi1(map[string]string{"cmd=get_maxes": "cmd=maxes kvs\x00name_max=256\n"}), ErrProtocol},
		{"pmi2-init-v1", true, pmi2(map[string]string{"cmd=init pmi_version=2 pmi_subversion=0": "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\n"}), ErrProtocol},
		{"pmi2-header-letters", true, pmi2(map[string]string{"cmd=fullinit": "abcdefcmd=x;"}), ErrProtocol},
		{"pmi2-header-zero", true, pmi2(map[string]string{"cmd=fullinit": "0     "}), ErrProtocol},
		{"pmi2-header-huge", true, pmi2(map[string]string{"cmd=fullinit": "999999cmd=fullinit-response;"}), ErrProtocol},
		{"pmi2-truncated", true, pmi2(map[string]string{"cmd=fullinit": "100   cmd=fullinit-response;rc=0;"}), ErrTimeout},
		{"pmi2-wrong-response", true, pmi2(map[string]string{"cmd=fullinit": slurm2("cmd=kvs-fence-response;rc=0;")}), ErrProtocol},
		{"pmi2-no-rank", true, pmi2(map[string]string{"cmd=fullinit": slurm2("cmd=fullinit-response;rc=0;size=4;")}), ErrProtocol},
		{"pmi2-size-absurd", true, pmi2(map[string]string{"cmd=fullinit": slurm2("cmd=fullinit-response;rc=0;rank=0;size=1000000000;")}), ErrProtocol},
		{"pmi2-rank-out-of-range", true, pmi2(map[string]string{"cmd=fullinit": slurm2("cmd=fullinit-response;rc=0;rank=4;size=4;")}), ErrProtocol},
		{"pmi2-rc", true, pmi2(map[string]string{"cmd=fullinit": slurm2("cmd=fullinit-response;rc=-1;errmsg=bad;")}), ErrProtocol},
		{"pmi2-empty-field", true, pmi2(map[string]string{"cmd=job-getid": slurm2("cmd=job-getid-response;;rc=0;")}), ErrProtocol},
		{"pmi2-found-maybe", true, pmi2(map[string]string{"cmd=info-getjobattr": slurm2("cmd=info-getjobattr-response;rc=0;found=MAYBE;")}), ErrProtocol},
		{"pmi2-bad-mapping", true, pmi2(map[string]string{"cmd=info-getjobattr": slurm2("cmd=info-getjobattr-response;rc=0;found=TRUE;value=(vector,(0,1,4);")}), ErrProtocol},
		{"pmi2-hangup", true, pmi2(map[string]string{"cmd=job-getid": "\x00CLOSE"}), ErrLauncherGone},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var f *fake
			reply := c.reply
			closing := func(m string) string {
				r := reply(m)
				if r == "\x00CLOSE" {
					f.c.Close()
					return ""
				}
				if strings.HasSuffix(r, "\x00") {
					// Send, then hang up mid-line.
					f.c.Write([]byte(strings.TrimSuffix(r, "\x00")))
					f.c.Close()
					return ""
				}
				return r
			}
			var fd int
			f, fd = startFake(t, c.v2, closing)
			env := pmi2Env(fd, 0, 4)
			if !c.v2 {
				env = map[string]string{"PMI_FD": strconv.Itoa(fd), "PMI_RANK": "0", "PMI_SIZE": "1", "AMIGO_PMI": "1"}
			}
			start := time.Now()
			_, err := OpenConfig(context.Background(), Config{Getenv: envMap(env), RequestTimeout: 500 * time.Millisecond})
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("took %v", d)
			}
			t.Log(err)
		})
	}
}

// TestLauncherDiesDuringFence: the launcher goes away while ranks wait in a
// fence; they get ErrLauncherGone at once, in both protocols.
func TestLauncherDiesDuringFence(t *testing.T) {
	for _, pmi := range []string{"1", "2"} {
		t.Run("pmi"+pmi, func(t *testing.T) {
			srv, _ := pmiserver.New(pmiserver.Config{Size: 3, ProcessMapping: "(vector,(0,1,3))"})
			secret := map[string]string{SecretEnv: strings.Repeat("11", 32), "AMIGO_PMI": pmi}
			envs := []map[string]string{rankEnv(t, srv, 0, 3, secret), rankEnv(t, srv, 1, 3, secret)}
			// Rank 2 never comes: the fence cannot complete.
			jobs := make([]Job, 2)
			for r := range jobs {
				c := Config{Getenv: envMap(envs[r])}
				j, err := OpenConfig(context.Background(), c)
				if err != nil {
					t.Fatal(err)
				}
				jobs[r] = j
			}
			time.AfterFunc(200*time.Millisecond, func() { srv.Close() })
			start := time.Now()
			err := parallel(jobs, func(j Job) error { return j.Fence(context.Background()) })
			if !errors.Is(err, ErrLauncherGone) {
				t.Fatalf("got %v, want ErrLauncherGone", err)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("took %v", d)
			}
			t.Log(err)
			// The job stays failed; nothing hangs afterwards either.
			if _, err := jobs[0].Get(context.Background(), 1, "x"); !errors.Is(err, ErrLauncherGone) {
				t.Fatalf("get after the launcher died: %v", err)
			}
			for _, j := range jobs {
				j.Close()
			}
		})
	}
}

// TestFenceBounded: a fence that cannot complete ends at the context's
// deadline, or at FenceTimeout.
func TestFenceBounded(t *testing.T) {
	srv, _ := pmiserver.New(pmiserver.Config{Size: 2, ProcessMapping: "(vector,(0,1,2))"})
	defer srv.Close()
	env := rankEnv(t, srv, 0, 2, map[string]string{SecretEnv: strings.Repeat("11", 32)})
	j, err := OpenConfig(context.Background(), Config{Getenv: envMap(env), FenceTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := j.Fence(context.Background()); !errors.Is(err, ErrTimeout) {
		t.Fatalf("fence: %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 3*time.Second {
		t.Fatalf("fence gave up after %v", d)
	}
	// A late reply could still come: the connection is unusable now.
	if err := j.Put("k", nil); err == nil {
		t.Fatal("put after a timed-out fence succeeded")
	}
	j.Close()

	srv2, _ := pmiserver.New(pmiserver.Config{Size: 2, ProcessMapping: "(vector,(0,1,2))"})
	defer srv2.Close()
	env = rankEnv(t, srv2, 1, 2, map[string]string{SecretEnv: strings.Repeat("11", 32)})
	j, err = OpenConfig(context.Background(), Config{Getenv: envMap(env)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	if err := j.Fence(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("fence: %v, want context.Canceled", err)
	}
	j.Close()
}

// TestCloseInterruptsFence: Close from another goroutine ends a fence.
func TestCloseInterruptsFence(t *testing.T) {
	srv, _ := pmiserver.New(pmiserver.Config{Size: 2, ProcessMapping: "(vector,(0,1,2))"})
	defer srv.Close()
	env := rankEnv(t, srv, 0, 2, map[string]string{SecretEnv: strings.Repeat("11", 32)})
	j, err := OpenConfig(context.Background(), Config{Getenv: envMap(env)})
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(200*time.Millisecond, func() { j.Close() })
	if err := j.Fence(context.Background()); err == nil {
		t.Fatal("fence succeeded without the other rank")
	}
	if err := j.Put("k", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("put after close: %v", err)
	}
}

// TestValueLimits: values are split to fit the launcher's vallen_max;
// values too big even when split, and keys too long, are refused with
// ErrValueTooLong before anything is sent.
func TestValueLimits(t *testing.T) {
	for _, pmi := range []string{"1", "2"} {
		t.Run("pmi"+pmi, func(t *testing.T) {
			srv, _ := pmiserver.New(pmiserver.Config{Size: 2, ValMax: 100, ProcessMapping: "(vector,(0,1,2))"})
			defer srv.Close()
			extra := map[string]string{"AMIGO_PMI": pmi}
			jobs := openAll(t, []map[string]string{rankEnv(t, srv, 0, 2, extra), rankEnv(t, srv, 1, 2, extra)}, Config{})
			if pmi == "1" {
				// vallen_max=100 from get_maxes: many parts per value.
				checkValuesUpTo(t, jobs, 2000)
			} else {
				// PMI-2 has no get_maxes; a launcher refusing a long put is an error.
				err := jobs[0].Put("big", make([]byte, 500))
				if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "vallen_max") {
					t.Fatalf("put over the launcher's limit: %v", err)
				}
			}
			for _, j := range jobs {
				if err := j.Put("huge", make([]byte, 1<<20)); !errors.Is(err, ErrValueTooLong) {
					t.Fatalf("1 MiB put: %v", err)
				}
				if err := j.Put(strings.Repeat("k", 41), nil); !errors.Is(err, ErrValueTooLong) {
					t.Fatalf("long key: %v", err)
				}
				if err := j.Put("bad key", nil); err == nil || errors.Is(err, ErrValueTooLong) {
					t.Fatalf("key with a blank: %v", err)
				}
				if err := j.Put("_amigo.secret", nil); err == nil {
					t.Fatal("reserved key accepted")
				}
			}
		})
	}
	// The limit with Hydra's and Slurm's 1024-byte values.
	keys, _, err := split("addr", 3, make([]byte, 40000), 63, 1023)
	if err != nil || len(keys) > maxParts {
		t.Fatalf("40000 bytes: %d parts, %v", len(keys), err)
	}
	if _, _, err := split("addr", 3, make([]byte, 50000), 63, 1023); !errors.Is(err, ErrValueTooLong) {
		t.Fatalf("50000 bytes: %v", err)
	}
}

func checkValuesUpTo(t *testing.T, jobs []Job, n int) {
	t.Helper()
	ctx := context.Background()
	err := parallel(jobs, func(j Job) error {
		if err := j.Put("v", make([]byte, n)); err != nil {
			return err
		}
		if err := j.Fence(ctx); err != nil {
			return err
		}
		for r := range j.Size() {
			v, err := j.Get(ctx, r, "v")
			if err != nil {
				return err
			}
			if len(v) != n {
				return fmt.Errorf("got %d bytes, want %d", len(v), n)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestAbort: both protocols deliver the abort and its exit code.
func TestAbort(t *testing.T) {
	for _, pmi := range []string{"1", "2"} {
		t.Run("pmi"+pmi, func(t *testing.T) {
			got := make(chan [2]int, 1)
			srv, _ := pmiserver.New(pmiserver.Config{Size: 1, OnAbort: func(r, code int, msg string) { got <- [2]int{r, code} }})
			defer srv.Close()
			j := openAll(t, []map[string]string{rankEnv(t, srv, 0, 1, map[string]string{"AMIGO_PMI": pmi})}, Config{})[0]
			if err := j.Abort(7, "stop; now=please"); err != nil {
				t.Fatal(err)
			}
			select {
			case g := <-got:
				if g != [2]int{0, 7} {
					t.Fatalf("abort reached the launcher as rank %d code %d", g[0], g[1])
				}
			case <-time.After(5 * time.Second):
				t.Fatal("abort did not reach the launcher")
			}
			if err := j.Fence(context.Background()); !errors.Is(err, ErrClosed) {
				t.Fatalf("fence after abort: %v", err)
			}
		})
	}
}

// TestHostIdentity: without PMI_process_mapping, ranks exchange host
// identities, and all ranks here share a host.
func TestHostIdentity(t *testing.T) {
	srv, _ := pmiserver.New(pmiserver.Config{Size: 3})
	defer srv.Close()
	var envs []map[string]string
	for r := range 3 {
		envs = append(envs, rankEnv(t, srv, r, 3, map[string]string{"AMIGO_PMI": "2"}))
	}
	jobs := openAll(t, envs, Config{})
	for _, j := range jobs {
		for r := range 3 {
			if j.Node(r) != 0 {
				t.Fatalf("rank %d: Node(%d) = %d", j.Rank(), r, j.Node(r))
			}
		}
		if j.Node(3) != -1 || j.Node(-1) != -1 {
			t.Fatal("Node of an out-of-range rank is not -1")
		}
	}
}

func TestBadEnvironment(t *testing.T) {
	for _, env := range []map[string]string{
		{"PMI_FD": "x", "PMI_RANK": "0", "PMI_SIZE": "1"},
		{"PMI_FD": "987654", "PMI_RANK": "0", "PMI_SIZE": "1"},
		{"PMI_FD": "-1", "PMI_RANK": "0", "PMI_SIZE": "1"},
		{"AMIGO_PMI": "3"},
		{"AMIGO_PMI_TIMEOUT": "soon"},
	} {
		if _, err := OpenConfig(context.Background(), Config{Getenv: envMap(env)}); !errors.Is(err, ErrEnv) {
			t.Errorf("%v: %v, want ErrEnv", env, err)
		}
	}
	// A rank out of range, from a well-formed launcher.
	srv, _ := pmiserver.New(pmiserver.Config{Size: 2})
	defer srv.Close()
	env := rankEnv(t, srv, 1, 2, map[string]string{"PMI_RANK": "5", "AMIGO_PMI": "1"})
	if _, err := OpenConfig(context.Background(), Config{Getenv: envMap(env)}); !errors.Is(err, ErrEnv) {
		t.Errorf("rank 5 of 2: %v", err)
	}
	// Nothing listening at PMI_PORT.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	if _, err := OpenConfig(context.Background(), Config{Getenv: envMap(map[string]string{"PMI_PORT": addr, "PMI_ID": "0"})}); err == nil {
		t.Error("open with nothing at PMI_PORT succeeded")
	}
}
