package bootstrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/bootstrap/pmiserver"
)

// TestJobOverServer runs a 4-rank job against the package's own launcher in
// every protocol and connection mode: rank, size, secret, node map, and
// values of every size up to the split limit, binary included.
func TestJobOverServer(t *testing.T) {
	const size = 4
	for _, tc := range []struct {
		name    string
		pmi     string
		port    bool
		left    bool
		mapping string
		nodes   []int
	}{
		{"pmi1-fd", "1", false, false, "(vector,(0,2,2))", []int{0, 0, 1, 1}},
		{"pmi2-fd", "2", false, false, "(vector,(0,1,4))", []int{0, 0, 0, 0}},
		{"pmi2-fd-slurm-justified", "2", false, true, "(vector,(0,4,1))", []int{0, 1, 2, 3}},
		{"pmi1-port", "1", true, false, "", nil},
		{"pmi2-port", "2", true, false, "(vector,(0,1,1))", []int{0, 0, 0, 0}},
		{"auto-is-pmi2-with-jobid", "auto", false, true, "(vector,(1,1,3),(0,1,1))", []int{1, 1, 1, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := pmiserver.New(pmiserver.Config{Size: size, ProcessMapping: tc.mapping, LeftJustify: tc.left})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			envs := make([]map[string]string, size)
			var l net.Listener
			if tc.port {
				l, err = net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				go srv.Serve(l)
			}
			for r := range size {
				extra := map[string]string{"AMIGO_PMI": tc.pmi}
				if tc.pmi == "auto" {
					extra["PMI_JOBID"] = "7.0"
				}
				if tc.port {
					envs[r] = map[string]string{"PMI_PORT": l.Addr().String(), "PMI_ID": strconv.Itoa(r), "AMIGO_PMI": tc.pmi}
				} else {
					envs[r] = rankEnv(t, srv, r, size, extra)
				}
			}
			jobs := openAll(t, envs, Config{})
			defer parallel(jobs, func(j Job) error { return j.Close() })
			for r, j := range jobs {
				if j.Rank() != r || j.Size() != size {
					t.Fatalf("job %d: rank %d size %d", r, j.Rank(), j.Size())
				}
				if want := string(jobs[0].Secret()); string(j.Secret()) != want || len(want) != SecretLen {
					t.Fatalf("rank %d secret %x, rank 0 %x", r, j.Secret(), want)
				}
				for p := range size {
					want := 0
					if tc.nodes != nil {
						want = tc.nodes[p]
					}
					if got := j.Node(p); got != want {
						t.Errorf("rank %d: Node(%d) = %d, want %d", r, p, got, want)
					}
				}
			}
			checkExchange(t, jobs)
		})
	}
}

// value is rank r's test value number i: binary, of varied lengths.
func value(r, i int) []byte {
	n := []int{0, 1, 6, 700, 5000, 20000}[i]
	b := make([]byte, n)
	for k := range b {
		b[k] = byte(r*31 + k*7 + i)
	}
	return b
}

func checkExchange(t *testing.T, jobs []Job) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := parallel(jobs, func(j Job) error {
		for i := range 6 {
			if err := j.Put("v"+strconv.Itoa(i), value(j.Rank(), i)); err != nil {
				return err
			}
		}
		// Invisible until the fence, even to the rank that put it.
		if _, err := j.Get(ctx, j.Rank(), "v1"); !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("rank %d: get before fence: %v, want ErrNotFound", j.Rank(), err)
		}
		if err := j.Fence(ctx); err != nil {
			return err
		}
		for p := range j.Size() {
			for i := range 6 {
				got, err := j.Get(ctx, p, "v"+strconv.Itoa(i))
				if err != nil {
					return fmt.Errorf("rank %d: %w", j.Rank(), err)
				}
				if !bytes.Equal(got, value(p, i)) {
					return fmt.Errorf("rank %d: value %d of rank %d: got %d bytes, want %d", j.Rank(), i, p, len(got), len(value(p, i)))
				}
			}
		}
		if _, err := j.Get(ctx, 0, "absent"); !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("absent key: %v", err)
		}
		return j.Fence(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestSingleton(t *testing.T) {
	j, err := OpenConfig(context.Background(), Config{Getenv: envMap(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if j.Rank() != 0 || j.Size() != 1 || j.Node(0) != 0 || len(j.Secret()) != SecretLen {
		t.Fatalf("singleton: rank %d size %d node %d secret %d bytes", j.Rank(), j.Size(), j.Node(0), len(j.Secret()))
	}
	checkExchange(t, []Job{j})
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	secret := strings.Repeat("ab", 20)
	j, err = OpenConfig(context.Background(), Config{Getenv: envMap(map[string]string{SecretEnv: secret})})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprintf("%x", j.Secret()) != secret {
		t.Fatalf("secret %x, want %s", j.Secret(), secret)
	}
	if _, err := OpenConfig(context.Background(), Config{Getenv: envMap(map[string]string{SecretEnv: "zz"})}); !errors.Is(err, ErrEnv) {
		t.Fatalf("bad secret: %v", err)
	}
	if _, err := OpenConfig(context.Background(), Config{Getenv: envMap(map[string]string{"AMIGO_PMI": "2"})}); !errors.Is(err, ErrEnv) {
		t.Fatalf("AMIGO_PMI=2 without a launcher: %v", err)
	}
}

func TestSecretFromLauncher(t *testing.T) {
	srv, _ := pmiserver.New(pmiserver.Config{Size: 2, ProcessMapping: "(vector,(0,1,2))"})
	defer srv.Close()
	secret := strings.Repeat("5a", 32)
	envs := []map[string]string{
		rankEnv(t, srv, 0, 2, map[string]string{SecretEnv: secret}),
		rankEnv(t, srv, 1, 2, map[string]string{SecretEnv: secret}),
	}
	jobs := openAll(t, envs, Config{})
	for _, j := range jobs {
		if fmt.Sprintf("%x", j.Secret()) != secret {
			t.Fatalf("rank %d secret %x", j.Rank(), j.Secret())
		}
	}
	checkExchange(t, jobs)
}
