package amigo_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/amigo-hpc/amigo"
)

// One-sided GET and PUT: rank 1 registers memory and hands its key to rank
// 0, which writes into it and reads it back without rank 1's handlers
// taking part.
func ExampleContext_Put() {
	clients, err := amigo.NewLocal(2, amigo.Config{})
	if err != nil {
		panic(err)
	}
	defer clients[0].Close()
	defer clients[1].Close()
	a := clients[0].Context(0)

	mem, err := clients[1].RegisterMemory(make([]byte, 64)) // rank 1's window
	if err != nil {
		panic(err)
	}
	key := mem.Key() // a real job hands it over in a message, or by RegisterAll

	ctx := context.Background()
	k := amigo.NewCounter()
	k.Add(1)
	a.Put(amigo.EndpointOf(1), []byte("written by rank 0"), key, 8, k.Done())
	a.WaitCounter(ctx, k) // the PUT has landed

	back := make([]byte, 17)
	k.Add(1)
	a.Get(amigo.EndpointOf(1), back, key, 8, k.Done())
	a.WaitCounter(ctx, k)
	fmt.Printf("%s\n%s\n", back, mem.Bytes()[8:25])
	// Output:
	// written by rank 0
	// written by rank 0
}

// Multicast: rank 0 announces 1 MiB to ranks 1, 2 and 3 once; each names a
// buffer, and the data travels from the origin once, forwarded along the
// targets.
func ExampleContext_Multicast() {
	clients, err := amigo.NewLocal(4, amigo.Config{})
	if err != nil {
		panic(err)
	}
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	data := make([]byte, 1<<20)
	data[len(data)-1] = 42

	var wg sync.WaitGroup
	got := make([]byte, 4)
	for r := 1; r < 4; r++ {
		c := clients[r].Context(0)
		buf := make([]byte, len(data))
		received := false
		c.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
			m.Receive(buf, func(err error) { received = err == nil })
		})
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Wait(ctx, func() bool { return received })
			got[r] = buf[len(buf)-1]
		}()
	}
	a := clients[0].Context(0)
	sent := false
	targets := []amigo.Endpoint{amigo.EndpointOf(1), amigo.EndpointOf(2), amigo.EndpointOf(3)}
	a.Multicast(targets, 1, nil, data, func(err error) { sent = err == nil })
	a.Wait(ctx, func() bool { return sent })
	wg.Wait()
	fmt.Println(got[1:])
	// Output: [42 42 42]
}

// Open joins the job the process was started in: under amirun, mpiexec or
// srun it learns its rank and peers from the launcher; started alone, as
// here, it is rank 0 of a job of one.
func ExampleOpen() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := amigo.Open(ctx, amigo.Config{})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	fmt.Printf("rank %d of %d\n", c.Rank(), c.Size())
	// Output: rank 0 of 1
}
