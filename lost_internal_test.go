package amigo

import (
	"bufio"
	"context"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/bootstrap"
	"github.com/amigo-hpc/amigo/bootstrap/pmiserver"
)

// slowLauncher relays a rank's PMI connection to a launcher and, once slow
// is set, holds each answer for delay before it passes it on.
type slowLauncher struct {
	slow    atomic.Bool
	delay   time.Duration
	delayed atomic.Int32 // answers passed on late
}

// connect makes rank's end of the relay and returns its PMI environment.
func (s *slowLauncher) connect(t *testing.T, srv *pmiserver.Server, rank, size int) map[string]string {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "relay")
	relay, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	launcher, toLauncher := net.Pipe()
	go srv.ServeConn(launcher, rank)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // rank to launcher, as it comes
		defer wg.Done()
		buf := make([]byte, 4096)
		for {
			n, err := relay.Read(buf)
			if n > 0 {
				if _, werr := toLauncher.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				toLauncher.Close()
				return
			}
		}
	}()
	go func() { // launcher to rank, line by line, late once slow
		defer wg.Done()
		r := bufio.NewReader(toLauncher)
		for {
			line, err := r.ReadBytes('\n')
			if len(line) > 0 {
				if s.slow.Load() {
					time.Sleep(s.delay)
				}
				if _, werr := relay.Write(line); werr != nil {
					return
				}
				if s.slow.Load() {
					s.delayed.Add(1)
				}
			}
			if err != nil {
				relay.Close()
				return
			}
		}
	}()
	t.Cleanup(func() {
		relay.Close()
		toLauncher.Close()
		wg.Wait()
	})
	return map[string]string{"PMI_FD": strconv.Itoa(fds[1]), "PMI_RANK": strconv.Itoa(rank), "PMI_SIZE": strconv.Itoa(size)}
}

// A rank of a job that goes on when ranks fail asks its launcher for the
// ranks it lost while it runs. A launcher that answers late (a loaded
// host: here each answer held well beyond the polling period) slows the
// polling, and nothing more: the rank's connection to it stays usable, and
// Close finalizes without error.
func TestLostPollSlowLauncher(t *testing.T) {
	t.Setenv("AMIGO_KEEP_GOING", "1")
	const size = 2
	srv, err := pmiserver.New(pmiserver.Config{Size: size, ProcessMapping: "(vector,(0,2,1))"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	sl := &slowLauncher{delay: 800 * time.Millisecond}
	envs := make([]map[string]string, size)
	for r := range envs {
		envs[r] = sl.connect(t, srv, r, size)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := make([]*Client, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range cl {
		wg.Add(1)
		go func() {
			defer wg.Done()
			env := envs[r]
			job, err := bootstrap.OpenConfig(ctx, bootstrap.Config{Getenv: func(k string) string { return env[k] }})
			if err != nil {
				errs[r] = err
				return
			}
			// As Open does, which reads the process's environment.
			c, err := OpenJob(ctx, job, Config{Transport: "tcp"})
			if err != nil {
				job.Close()
				errs[r] = err
				return
			}
			c.job = job
			c.watchLost(job)
			cl[r] = c
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: open: %v", r, err)
		}
	}
	sl.slow.Store(true)
	// Two late answers: both ranks polled at least once at the slow pace.
	for sl.delayed.Load() < 2 {
		select {
		case <-ctx.Done():
			t.Fatal("the ranks did not ask their launcher for lost ranks")
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := cl[0].Context(0).PeerErr(EndpointOf(1)); err != nil {
		t.Fatalf("rank 1 reported lost: %v", err)
	}
	for r, c := range cl {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = c.Close()
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: close: %v", r, err)
		}
	}
}
