package bootstrap

import (
	"context"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/bootstrap/pmiserver"
)

// envMap is a Getenv over a map.
func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// socketPair returns the launcher's end as a net.Conn and the rank's end as
// a descriptor number (which the client takes over, as PMI_FD).
func socketPair(t testing.TB) (net.Conn, int) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "launcher-end")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, fds[1]
}

// rankEnv connects rank to srv through a socket pair and returns its
// environment, as a launcher would set it.
func rankEnv(t testing.TB, srv *pmiserver.Server, rank, size int, extra map[string]string) map[string]string {
	c, fd := socketPair(t)
	go srv.ServeConn(c, rank)
	env := map[string]string{
		"PMI_FD":   strconv.Itoa(fd),
		"PMI_RANK": strconv.Itoa(rank),
		"PMI_SIZE": strconv.Itoa(size),
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// openAll opens size jobs concurrently, one per env, and fails the test on
// any error.
func openAll(t testing.TB, envs []map[string]string, cfg Config) []Job {
	t.Helper()
	jobs := make([]Job, len(envs))
	errs := make([]error, len(envs))
	var wg sync.WaitGroup
	for r := range envs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cfg
			c.Getenv = envMap(envs[r])
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			jobs[r], errs[r] = OpenConfig(ctx, c)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: Open: %v", r, err)
		}
	}
	return jobs
}

// parallel runs f for every job concurrently and returns the first error.
func parallel(jobs []Job, f func(j Job) error) error {
	errs := make(chan error, len(jobs))
	for _, j := range jobs {
		go func() { errs <- f(j) }()
	}
	var first error
	for range jobs {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}
