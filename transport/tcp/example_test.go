package tcp_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/amigo-hpc/amigo/bootstrap"
	"github.com/amigo-hpc/amigo/internal/ring"
	"github.com/amigo-hpc/amigo/transport"
	"github.com/amigo-hpc/amigo/transport/tcp"
)

type printer struct{ got chan string }

func (p printer) Receive(from transport.Addr, pkt []byte) {
	p.got <- fmt.Sprintf("%s from %v", pkt, from)
}

// Two ranks of a job connect over TCP (here both in this process, on
// loopback) and one sends the other a packet, driving the adapter through
// the transport contract as the AMI does.
func Example() {
	jobs := bootstrap.NewLocal(2)
	ads := make([]*tcp.Adapter, 2)
	for r := range ads {
		a, err := tcp.New(jobs[r], transport.NewRegions(), tcp.Options{Addr: "127.0.0.1"})
		if err != nil {
			panic(err)
		}
		defer a.Close()
		ads[r] = a
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for r := range ads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			jobs[r].Fence(ctx)
			ads[r].Start(ctx)
		}()
	}
	wg.Wait()
	src, _ := ads[0].Open(0, transport.NewDoorbell())
	dst, _ := ads[1].Open(0, transport.NewDoorbell())
	l, _ := src.Link(transport.Addr{Rank: 1, Context: 0})

	// Inject one descriptor, as the AMI's send path does.
	msg := []byte("hello")
	copy(l.Msg.Payload(0, len(msg)), msg)
	l.Msg.Seal(0, len(msg))
	l.Msg.Publish(uint64(ring.SlotsFor(len(msg))))

	p := printer{got: make(chan string, 1)}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		src.Progress()
		if dst.Poll(p, 8) > 0 {
			fmt.Println(<-p.got)
			break
		}
	}
	// Output: hello from rank 0 context 0
}
