package amigo_test

import (
	"errors"
	"testing"

	"github.com/amigo-hpc/amigo"
)

// A handler's Reply reaches the source, in order with what the handler
// posted before it, allocation-free; bad arguments are refused with an
// error.
func TestReply(t *testing.T) {
	for _, over := range []string{"loop", "shm"} {
		t.Run(over, func(t *testing.T) {
			cl := openOver(t, 2, amigo.Config{}, over)
			c0, c1 := cl[0].Context(0), cl[1].Context(0)
			var replyErr error
			checked := false
			// Rank 1 answers each request with n messages: n-1 posted with
			// SendImmediate, the last by Reply, each carrying its index.
			c1.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
				n := int(m.Data[0])
				for i := 0; i < n-1; i++ {
					if err := c.SendImmediate(m.Source, 2, nil, []byte{byte(i)}); err != nil {
						replyErr = err
					}
				}
				if err := m.Reply(2, nil, []byte{byte(n - 1)}); err != nil {
					replyErr = err
				}
				if !checked {
					checked = true
					if err := m.Reply(amigo.MaxDispatch, nil, nil); !errors.Is(err, amigo.ErrBadDispatch) {
						replyErr = errors.New("Reply to a bad dispatch id did not fail")
					}
					if err := m.Reply(2, nil, make([]byte, amigo.ImmediateMax+1)); !errors.Is(err, amigo.ErrTooLarge) {
						replyErr = errors.New("Reply of too many bytes did not fail")
					}
				}
			})
			var got []int
			c0.SetDispatch(2, func(c *amigo.Context, m *amigo.Message) { got = append(got, int(m.Data[0])) })
			ep1 := amigo.EndpointOf(1)
			// The first request finds rank 1 not yet connected to rank 0.
			for _, n := range []int{1, 1, 3, 1, 5, 2} {
				got = got[:0]
				if err := c0.SendImmediate(ep1, 1, nil, []byte{byte(n)}); err != nil {
					t.Fatal(err)
				}
				advanceUntil(t, func() bool { return len(got) == n || replyErr != nil }, c0, c1)
				if replyErr != nil {
					t.Fatal(replyErr)
				}
				for i, v := range got {
					if v != i {
						t.Fatalf("answers to a request for %d arrived as %v", n, got)
					}
				}
			}
			if over != "loop" {
				return
			}
			before := c1.Stats().SentInline
			one := []byte{1}
			answered := func() bool { return len(got) == 1 }
			requireZeroAllocs(t, "request and Reply", func() {
				got = got[:0]
				if err := c0.SendImmediate(ep1, 1, nil, one); err != nil {
					t.Fatal(err)
				}
				advanceUntil(t, answered, c0, c1)
			})
			if c1.Stats().SentInline == before {
				t.Fatal("replies not counted")
			}
		})
	}
}
