package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/internal/launch"
	"github.com/amigo-hpc/amigo/mpi"
)

var testParams = Params{N: 61, MaxIter: 5000, Tol: 1e-4}

// solveLocal runs Solve on p ranks as goroutines and returns rank 0's
// result.
func solveLocal(t *testing.T, p int, prm Params) Result {
	t.Helper()
	cls, err := amigo.NewLocal(p, amigo.Config{SpinIterations: 50, YieldIterations: 50})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range cls {
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var res Result
	errs := make([]error, p)
	var wg sync.WaitGroup
	for i, cl := range cls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w, err := mpi.World(ctx, cl.Context(0), nil)
			if err != nil {
				errs[i] = err
				return
			}
			r, err := Solve(ctx, w, prm)
			if err == nil {
				err = mpi.Finalize(ctx, w)
			}
			errs[i] = err
			if i == 0 {
				res = r
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%d ranks: rank %d: %v", p, i, err)
		}
	}
	return res
}

func samePlate(t *testing.T, what string, got, want Result) {
	t.Helper()
	if got.Iterations != want.Iterations || got.Change != want.Change || got.Checksum != want.Checksum {
		t.Fatalf("%s: %d iterations, change %v, checksum %v; one rank: %d, %v, %v", what,
			got.Iterations, got.Change, got.Checksum, want.Iterations, want.Change, want.Checksum)
	}
	for i := range want.Plate {
		if math.Float64bits(got.Plate[i]) != math.Float64bits(want.Plate[i]) {
			t.Fatalf("%s: point %d is %v, one rank gives %v", what, i, got.Plate[i], want.Plate[i])
		}
	}
}

// The plate computed on several ranks equals, bit for bit, the one computed
// on one rank: same iterations, same values.
func TestSameAsOneRank(t *testing.T) {
	one := solveLocal(t, 1, testParams)
	if one.Iterations < 100 || one.Iterations == testParams.MaxIter {
		t.Fatalf("one rank: %d iterations; the test wants a run that converges after a while", one.Iterations)
	}
	for _, p := range []int{2, 3, 4, 7} {
		t.Run(fmt.Sprint(p), func(t *testing.T) {
			samePlate(t, fmt.Sprintf("%d ranks", p), solveLocal(t, p, testParams), one)
		})
	}
}

// The same with ranks as processes over shared memory: the test binary runs
// itself as the ranks, rank 0 writes the plate to a file.
const plateEnv = "JACOBI_TEST_PLATE"

func TestMain(m *testing.M) {
	if path := os.Getenv(plateEnv); path != "" && launch.InRank() {
		os.Exit(plateRank(path))
	}
	os.Exit(m.Run())
}

func plateRank(path string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := amigo.Open(ctx, amigo.Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cl.Close()
	w, err := mpi.World(ctx, cl.Context(0), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	res, err := Solve(ctx, w, testParams)
	if err == nil && w.Rank() == 0 {
		var b bytes.Buffer
		binary.Write(&b, binary.LittleEndian, int64(res.Iterations))
		binary.Write(&b, binary.LittleEndian, res.Change)
		binary.Write(&b, binary.LittleEndian, res.Checksum)
		binary.Write(&b, binary.LittleEndian, res.Plate)
		err = os.WriteFile(path, b.Bytes(), 0o600)
	}
	if err == nil {
		err = mpi.Finalize(ctx, w)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "rank %d: %v\n", cl.Rank(), err)
		return 1
	}
	return 0
}

func TestSameAsOneRankProcesses(t *testing.T) {
	one := solveLocal(t, 1, testParams)
	const p = 3
	path := filepath.Join(t.TempDir(), "plate")
	var out bytes.Buffer
	job, err := launch.Start(launch.Options{
		N:    p,
		Argv: []string{os.Args[0]},
		Env:  []string{plateEnv + "=" + path, "AMIGO_TRANSPORT=shm", "GORACE=atexit_sleep_ms=0"},
		Output: func(int) (io.Writer, io.Writer) {
			return nil, &syncWriter{b: &out}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := job.Wait(ctx); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got Result
	var iters int64
	rd := bytes.NewReader(b)
	binary.Read(rd, binary.LittleEndian, &iters)
	binary.Read(rd, binary.LittleEndian, &got.Change)
	binary.Read(rd, binary.LittleEndian, &got.Checksum)
	got.Iterations = int(iters)
	got.Plate = make([]float64, testParams.N*testParams.N)
	if err := binary.Read(rd, binary.LittleEndian, got.Plate); err != nil {
		t.Fatal(err)
	}
	samePlate(t, fmt.Sprintf("%d processes", p), got, one)
}

type syncWriter struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
