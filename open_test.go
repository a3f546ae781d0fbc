package amigo_test

import (
	"context"
	"errors"
	"testing"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/bootstrap"
)

// Started alone, a program is a job of one rank that can message itself.
func TestOpenSingleton(t *testing.T) {
	t.Setenv("AMIGO_PMI", "singleton")
	c, err := amigo.Open(context.Background(), amigo.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Rank() != 0 || c.Size() != 1 {
		t.Fatalf("rank %d of %d", c.Rank(), c.Size())
	}
	ctx := c.Context(0)
	got := 0
	ctx.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) { got += len(m.Data) })
	if err := ctx.Send(amigo.EndpointOf(0), 1, nil, make([]byte, 100_000), nil); err != nil {
		t.Fatal(err)
	}
	if err := ctx.SendImmediate(amigo.EndpointOf(0), 1, nil, []byte("x")); err != nil {
		t.Fatal(err)
	}
	// The large send arrives announced; the handler above declines it, so
	// only the immediate is counted.
	if err := ctx.Wait(context.Background(), func() bool { return got == 1 }); err != nil {
		t.Fatal(err)
	}
}

// A job whose ranks no adapter reaches is refused with a clear error: here
// two hosts, with only the shared-memory adapter allowed.
func TestOpenJobUnreachable(t *testing.T) {
	jobs := bootstrap.NewLocalOnNodes([]int{0, 1})
	errs := make(chan error, 2)
	for _, j := range jobs {
		go func(j bootstrap.Job) {
			c, err := amigo.OpenJob(context.Background(), j, amigo.Config{Transport: "shm"})
			if c != nil {
				c.Close()
			}
			errs <- err
		}(j)
	}
	for i := 0; i < 2; i++ {
		err := <-errs
		if err == nil {
			t.Fatal("a job with no adapter between its processes opened")
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
	}
}
