package bootstrap

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"
)

func TestLocal(t *testing.T) {
	jobs := NewLocal(4)
	for r, j := range jobs {
		if j.Rank() != r || j.Size() != 4 || j.Node(r) != 0 || !bytes.Equal(j.Secret(), jobs[0].Secret()) {
			t.Fatalf("job %d: rank %d size %d", r, j.Rank(), j.Size())
		}
	}
	checkExchange(t, jobs)
	if err := jobs[0].Put("v0", nil); err == nil {
		t.Fatal("second put of a key accepted")
	}
}

func TestLocalOnNodes(t *testing.T) {
	jobs := NewLocalOnNodes([]int{0, 0, 1})
	if jobs[2].Node(0) != 0 || jobs[0].Node(2) != 1 || jobs[0].Node(3) != -1 {
		t.Fatal("node map not as given")
	}
}

func TestLocalFenceEnds(t *testing.T) {
	// A cancelled fence withdraws; the next full fence still works.
	jobs := NewLocal(2)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := jobs[0].Fence(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("fence alone: %v", err)
	}
	checkExchange(t, jobs)

	// Abort fails waiting and later calls on every rank.
	jobs = NewLocal(3)
	time.AfterFunc(100*time.Millisecond, func() { jobs[2].Abort(3, "test") })
	err := parallel(jobs[:2], func(j Job) error { return j.Fence(context.Background()) })
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("fence during abort: %v", err)
	}
	if _, err := jobs[0].Get(context.Background(), 0, "x"); !errors.Is(err, ErrClosed) {
		t.Fatalf("get after abort: %v", err)
	}

	// A rank that closes makes fences fail, but gets still work.
	jobs = NewLocal(2)
	parallel(jobs, func(j Job) error {
		j.Put("k", []byte{byte(j.Rank())})
		return j.Fence(context.Background())
	})
	jobs[1].Close()
	if err := jobs[0].Fence(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("fence after a rank closed: %v", err)
	}
	if v, err := jobs[0].Get(context.Background(), 1, "k"); err != nil || !bytes.Equal(v, []byte{1}) {
		t.Fatalf("get after a rank closed: %v %v", v, err)
	}
}
