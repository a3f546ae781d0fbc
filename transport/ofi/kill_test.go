//go:build ofi

package ofi

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/internal/fifo"
	"github.com/amigo-hpc/amigo/internal/procfs"
	"github.com/amigo-hpc/amigo/internal/ring"
	"github.com/amigo-hpc/amigo/transport"
)

// The killed-peer test runs rank 1 as a child process: this test binary,
// started again with childEnv naming the job's directory.
const childEnv = "AMIGO_OFI_TEST_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(echoEnv); dir != "" {
		if err := echoChild(dir, os.Getenv("AMIGO_OFI_PROVIDER"), os.Getenv(echoModeEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "echo child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if dir := os.Getenv(childEnv); dir != "" {
		if err := child(dir, os.Getenv("AMIGO_OFI_PROVIDER")); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fileJob is a bootstrap between processes through files in a directory.
type fileJob struct {
	dir        string
	rank, size int
}

func (j *fileJob) Rank() int { return j.rank }
func (j *fileJob) Size() int { return j.size }
func (j *fileJob) Put(key string, value []byte) error {
	tmp := filepath.Join(j.dir, fmt.Sprintf(".%d.%s", j.rank, key))
	if err := os.WriteFile(tmp, value, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(j.dir, fmt.Sprintf("%d.%s", j.rank, key)))
}
func (j *fileJob) Get(ctx context.Context, rank int, key string) ([]byte, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		b, err := os.ReadFile(filepath.Join(j.dir, fmt.Sprintf("%d.%s", rank, key)))
		if err == nil {
			return b, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%q of rank %d: %w", key, rank, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
func (j *fileJob) Node(rank int) int { return 0 }
func (j *fileJob) Secret() []byte    { return []byte("0123456789abcdef0123456789abcdef") }

// child is this test binary run again as a child process.
type childProc struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// startChild starts this test binary again with env added to its
// environment.
func startChild(tb testing.TB, env ...string) *childProc {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	c := &childProc{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(c.exited) }()
	return c
}

// pause stops the child (SIGSTOP) and waits until it is stopped.
func (c *childProc) pause(tb testing.TB) {
	tb.Helper()
	pid := c.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		tb.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := procfs.State(pid)
		if err != nil {
			tb.Fatal(err)
		}
		if st == 'T' {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("child %d not stopped 10s after SIGSTOP: state %q", pid, st)
		}
		time.Sleep(time.Millisecond)
	}
}

// kill kills the child and waits until it is gone.
func (c *childProc) kill() {
	_ = c.cmd.Process.Kill()
	<-c.exited
}

// stop waits up to grace for the child to exit, then kills it, and
// removes the shm provider's files of the child, which a killed process
// leaves behind (it cannot unlink them).
func (c *childProc) stop(grace time.Duration) {
	select {
	case <-c.exited:
	case <-time.After(grace):
		c.kill()
	}
	left, _ := filepath.Glob(filepath.Join(shmDir, fmt.Sprintf("%s%d-*", shmPrefix(), c.cmd.Process.Pid)))
	for _, f := range left {
		_ = os.Remove(f)
	}
}

// child is rank 1: it registers a region, publishes its key, and polls
// until it is killed.
func child(dir, prov string) error {
	job := &fileJob{dir: dir, rank: 1, size: 2}
	reg := transport.NewRegions()
	a, err := New(job, reg, Options{Provider: prov, Logf: func(string, ...any) {}})
	if err != nil {
		return err
	}
	if err := a.Start(context.Background()); err != nil {
		return err
	}
	p, err := a.Open(0, transport.NewDoorbell())
	if err != nil {
		return err
	}
	mem := make([]byte, 4096)
	for i := range mem {
		mem[i] = byte(i)
	}
	key, err := reg.Register(mem)
	if err != nil {
		return err
	}
	if err := job.Put("key", binary.LittleEndian.AppendUint64(nil, uint64(key))); err != nil {
		return err
	}
	var sink cnt
	for {
		p.Poll(&sink, 64)
		p.Progress()
	}
}

// A peer process that is killed makes the operations toward it fail with
// a *transport.PeerError naming it, within the adapter's timeout: a GET in
// flight and packets sent after the death, over each provider.
//
// With sendNow, the only packet toward the dead peer is one the link sent
// at once, outside its ring (transport.Link.SendNow), while the peer was
// stopped just before it was killed: the link still fails once the peer
// stays silent.
func TestKilledPeer(t *testing.T) {
	for _, prov := range providers() {
		t.Run(prov, func(t *testing.T) { testKilledPeer(t, prov, false) })
		t.Run("sendnow:"+prov, func(t *testing.T) { testKilledPeer(t, prov, true) })
	}
}

func testKilledPeer(t *testing.T, prov string, sendNow bool) {
	dir := t.TempDir()
	peer := startChild(t, childEnv+"="+dir, "AMIGO_OFI_PROVIDER="+prov)
	defer peer.stop(0)
	const timeout = 2 * time.Second
	job := &fileJob{dir: dir, rank: 0, size: 2}
	log := &logSink{t: t}
	a, err := New(job, transport.NewRegions(), Options{Provider: prov, Timeout: timeout, Logf: log.logf})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	kb, err := job.Get(context.Background(), 1, "key")
	if err != nil {
		t.Fatal(err)
	}
	key := transport.Key(binary.LittleEndian.Uint64(kb))
	p, err := a.Open(0, transport.NewDoorbell())
	if err != nil {
		t.Fatal(err)
	}
	l, err := p.Link(transport.Addr{Rank: 1})
	if err != nil {
		t.Fatal(err)
	}
	rdma := fifo.New(l.RDMA.Slots(), l.RDMA.HeadCounter(), l.RDMA.TransferCounter(), l.RDMA.Status)
	get := func(buf []byte) (err error) {
		done := false
		d := l.RDMA.Slot(rdma.Tail())
		d.Kind, d.Local, d.Key, d.Off = transport.Get, buf, key, 0
		rdma.Inject(1, fifo.Func(func(e error) { err, done = e, true }))
		l.RDMA.Publish(rdma.Tail())
		deadline := time.Now().Add(60 * time.Second)
		for !done {
			if e := l.Err(); e != nil {
				rdma.Complete()
				rdma.Fail(e)
				break
			}
			p.Progress()
			p.Poll(&cnt{}, 8)
			rdma.Complete()
			if time.Now().After(deadline) {
				t.Fatal("GET neither completed nor failed in 60s")
			}
		}
		return err
	}
	// The peer works: a GET reads its region.
	buf := make([]byte, 100)
	if err := get(buf); err != nil {
		t.Fatalf("GET from the live peer: %v", err)
	}
	for i, b := range buf {
		if b != byte(i) {
			t.Fatalf("GET byte %d is %d", i, b)
		}
	}
	if sendNow {
		// The peer is stopped first, its connection still open: nothing of
		// the link is in flight and the provider takes the packet at once
		// (it is offered again while the provider has no room for it).
		// Offered to a peer already dead, tcp;ofi_rxm may refuse it for as
		// long as it is offered, while the AMI would have written it into
		// the descriptor buffer after the first refusal, where the ring's
		// wait for the provider is timed: the case the loop below sends.
		peer.pause(t)
		deadline := time.Now().Add(10 * time.Second)
		for !l.SendNow(make([]byte, 8)) {
			if err := l.Err(); err != nil {
				t.Fatalf("the link to a stopped peer failed before anything was sent: %v", err)
			}
			p.Progress()
			p.Poll(&cnt{}, 8)
			if time.Now().After(deadline) {
				t.Fatal("SendNow refused a packet on a quiet link to a live peer for 10s")
			}
		}
	}
	peer.kill()
	killed := time.Now()
	if sendNow {
		deadline := time.Now().Add(60 * time.Second)
		for l.Err() == nil {
			p.Progress()
			p.Poll(&cnt{}, 8)
			if time.Now().After(deadline) {
				t.Fatal("the link to the killed peer did not fail in 60s with a packet sent at once in flight")
			}
		}
	}
	// Packets toward the dead peer and a GET: the link fails with an error
	// naming rank 1, and the GET with it.
	for i := 0; i < 4; i++ {
		tail := l.Msg.Tail()
		l.Msg.Seal(tail, 100)
		l.Msg.Publish(tail + uint64(ring.SlotsFor(100)))
	}
	err = get(make([]byte, 100))
	var pe *transport.PeerError
	if !errors.As(err, &pe) || pe.Addr.Rank != 1 {
		t.Fatalf("GET from the killed peer: %v, want a *transport.PeerError naming rank 1", err)
	}
	if !errors.As(l.Err(), &pe) || pe.Addr.Rank != 1 {
		t.Fatalf("link error %v does not name rank 1", l.Err())
	}
	t.Logf("%s: failed %v after the kill: %v", prov, time.Since(killed).Round(time.Millisecond), err)
}
