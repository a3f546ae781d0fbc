package amigo_test

import (
	"context"
	"fmt"

	"github.com/amigo-hpc/amigo"
)

// Two ranks in one process: an inline message and a large one fetched by
// rendezvous.
func Example() {
	clients, err := amigo.NewLocal(2, amigo.Config{})
	if err != nil {
		panic(err)
	}
	defer clients[0].Close()
	defer clients[1].Close()
	a, b := clients[0].Context(0), clients[1].Context(0)

	got := 0
	b.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
		if m.Inline() {
			got += len(m.Data)
			return
		}
		buf := make([]byte, m.Size())
		m.Receive(buf, func(err error) { got += len(buf) })
	})
	served := make(chan struct{})
	go func() {
		defer close(served)
		b.Wait(context.Background(), func() bool { return got == 1<<20+5 })
	}()

	a.SendImmediate(amigo.EndpointOf(1), 1, nil, []byte("hello"))
	done := false
	a.Send(amigo.EndpointOf(1), 1, nil, make([]byte, 1<<20), func(err error) { done = err == nil })
	a.Wait(context.Background(), func() bool { return done })
	<-served
	fmt.Println(got)
	// Output: 1048581
}
