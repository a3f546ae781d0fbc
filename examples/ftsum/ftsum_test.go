package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/internal/launch"
	"github.com/amigo-hpc/amigo/mpi"
)

const argsEnv = "FTSUM_TEST_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(argsEnv); args != "" && launch.InRank() {
		os.Args = append([]string{"ftsum"}, strings.Fields(args)...)
		main()
	}
	os.Exit(m.Run())
}

// Ranks as goroutines: worker 2 closes its client with a task in hand;
// the master hands the task on, and the three survivors end with the
// right total.
func TestLosesWorkerLocal(t *testing.T) {
	for _, after := range []int{0, 5} {
		t.Run(fmt.Sprint("after=", after), func(t *testing.T) {
			cls, err := amigo.NewLocal(4, amigo.Config{SpinIterations: 50, YieldIterations: 50})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			prm := Params{Tasks: 300, Chunk: 100, DieRank: 2, DieAfter: after}
			reps := make([]Report, 4)
			errs := make([]error, 4)
			var wg sync.WaitGroup
			for i, cl := range cls {
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer cl.Close()
					p := prm
					p.Die = func() { cl.Close() }
					w, err := mpi.World(ctx, cl.Context(0), nil)
					if err != nil {
						errs[i] = err
						return
					}
					reps[i], errs[i] = Run(ctx, w, p)
					if errs[i] == nil {
						errs[i] = mpi.Finalize(ctx, w)
					}
				}()
			}
			wg.Wait()
			want := Want(prm.Tasks, prm.Chunk)
			// With after=5, worker 2 may get no sixth task (the others
			// took them all): then it stays to the end.
			left := errors.Is(errs[2], ErrLeft)
			survivors := 3
			if !left {
				survivors = 4
			}
			for i, err := range errs {
				switch {
				case i == 2 && after == 0 && !left:
					t.Errorf("rank 2: %v, want ErrLeft", err)
				case i == 2 && left:
				case err != nil:
					t.Errorf("rank %d: %v", i, err)
				case reps[i].Total != want || reps[i].Survived != survivors:
					t.Errorf("rank %d: total %d on %d survivors, want %d on %d", i, reps[i].Total, reps[i].Survived, want, survivors)
				}
			}
			if after == 0 && !slices.Equal(reps[0].Lost, []int{2}) {
				t.Errorf("master lost %v, want [2]", reps[0].Lost)
			}
		})
	}
}

// Ranks as processes, launched as amirun --keep-going launches them: worker
// 2 is killed (SIGKILL) with a task in hand, and the job ends with the
// right total, over shared memory and over TCP.
func TestLosesWorkerProcesses(t *testing.T) {
	for _, tr := range []string{"shm", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			var stdout, stderr syncBuffer
			job, err := launch.Start(launch.Options{
				N:    4,
				Argv: []string{os.Args[0]},
				Env: []string{argsEnv + "=-tasks 500 -chunk 1000 -die 2:0", "AMIGO_TRANSPORT=" + tr,
					"AMIGO_TCP_TIMEOUT=2s", "GORACE=atexit_sleep_ms=0"},
				Output:    func(int) (io.Writer, io.Writer) { return &stdout, &stderr },
				KeepGoing: true,
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			err = job.Wait(ctx)
			var ee *launch.ExitErrors
			if !errors.As(err, &ee) || !slices.Equal(ee.Ranks, []int{2}) || !strings.Contains(err.Error(), "killed") {
				t.Fatalf("%v, want rank 2 killed\n%s%s", err, stdout.String(), stderr.String())
			}
			want := fmt.Sprintf("total %d of 500 tasks on 4 ranks; lost [2]; 3 survived\n", Want(500, 1000))
			if stdout.String() != want {
				t.Fatalf("output %q, want %q\n%s", stdout.String(), want, stderr.String())
			}
		})
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
