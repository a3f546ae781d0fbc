// Command gateway puts amigo behind a TCP service: rank 0 accepts clients on
// a net.Listener and hands each line a client sends, as an active message,
// to one of the other ranks in turn; that rank answers (the line in upper
// case, and its rank), and rank 0 writes the answer back to the client.
//
// Rank 0 waits on everything at once with one select: new connections,
// lines read from them, and amigo's Context.Ready, which fires when a
// packet arrives. Nothing spins: an idle gateway uses no processor.
//
//	amirun -n 3 gateway -listen 127.0.0.1:7000
//	go run ./examples/gateway -ranks 3 -listen 127.0.0.1:7000
//
// then, say, `echo hello | nc 127.0.0.1 7000` prints "HELLO (rank 1)".
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/amigo-hpc/amigo"
)

// Dispatch ids: a request to a worker, and its answer.
const (
	dRequest amigo.Dispatch = 1
	dAnswer  amigo.Dispatch = 2
)

// maxLine is the longest line served: a request travels in one immediate
// message with its 8-byte id.
const maxLine = amigo.ImmediateMax - 8

// line is a request read from a client.
type line struct {
	conn net.Conn
	text string
}

// Gateway runs rank 0: it serves ln until ctx ends, and then tells the
// workers to stop (an empty request).
func Gateway(ctx context.Context, cl *amigo.Client, ln net.Listener) error {
	c := cl.Context(0)
	conns := make(chan net.Conn)
	lines := make(chan line)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				close(conns)
				return
			}
			select {
			case conns <- conn:
			case <-ctx.Done():
				conn.Close()
			}
		}
	}()
	var readers sync.WaitGroup
	defer readers.Wait()
	open := map[uint64]net.Conn{} // requests in flight, by id
	byConn := map[net.Conn]bool{}
	defer func() {
		for conn := range byConn {
			conn.Close()
		}
	}()
	var next uint64
	worker := 0
	c.SetDispatch(dAnswer, func(c *amigo.Context, m *amigo.Message) {
		if len(m.Data) < 8 {
			return
		}
		id := binary.LittleEndian.Uint64(m.Data)
		if conn, ok := open[id]; ok {
			delete(open, id)
			fmt.Fprintf(conn, "%s\n", m.Data[8:])
		}
	})
	defer c.SetDispatch(dAnswer, nil)
	for {
		select {
		case <-ctx.Done():
			for r := 1; r < cl.Size(); r++ {
				_ = c.SendImmediate(amigo.EndpointOf(r), dRequest, nil, nil)
			}
			for c.AdvanceWait(10*time.Millisecond) > 0 {
			}
			return nil
		case conn, ok := <-conns:
			if !ok {
				conns = nil
				continue
			}
			byConn[conn] = true
			readers.Add(1)
			go func() {
				defer readers.Done()
				s := bufio.NewScanner(conn)
				for s.Scan() {
					select {
					case lines <- line{conn, s.Text()}:
					case <-ctx.Done():
						return
					}
				}
			}()
		case l := <-lines:
			text := strings.TrimSpace(l.text)
			if text == "" || len(text) > maxLine || cl.Size() < 2 {
				fmt.Fprintf(l.conn, "error: want 1 to %d bytes, and a worker rank\n", maxLine)
				continue
			}
			next++
			open[next] = l.conn
			var req [amigo.ImmediateMax]byte
			binary.LittleEndian.PutUint64(req[:], next)
			n := 8 + copy(req[8:], text)
			worker = worker%(cl.Size()-1) + 1
			if err := c.SendImmediate(amigo.EndpointOf(worker), dRequest, nil, req[:n]); err != nil {
				return err
			}
			for c.Advance() > 0 {
			}
		case <-c.Ready():
			for c.Advance() > 0 {
			}
		}
	}
}

// Worker runs the other ranks: it answers requests until an empty one.
func Worker(ctx context.Context, cl *amigo.Client) error {
	c := cl.Context(0)
	stop := false
	c.SetDispatch(dRequest, func(c *amigo.Context, m *amigo.Message) {
		if len(m.Data) < 8 {
			stop = true
			return
		}
		ans := make([]byte, 0, amigo.ImmediateMax)
		ans = append(ans, m.Data[:8]...)
		ans = append(ans, strings.ToUpper(string(m.Data[8:]))...)
		ans = fmt.Appendf(ans, " (rank %d)", cl.Rank())
		if len(ans) > amigo.ImmediateMax {
			ans = ans[:amigo.ImmediateMax]
		}
		if err := m.Reply(dAnswer, nil, ans); err != nil {
			fmt.Fprintln(os.Stderr, "gateway: reply:", err)
		}
	})
	for !stop {
		// Sleep until a request comes, a second at most.
		c.AdvanceWait(time.Second)
		if err := ctx.Err(); err != nil && !stop {
			return err
		}
	}
	for c.AdvanceWait(10*time.Millisecond) > 0 { // the last answers leave
	}
	return nil
}

func rank(ctx context.Context, cl *amigo.Client, listen string) error {
	if cl.Rank() != 0 {
		return Worker(context.Background(), cl)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	defer ln.Close()
	fmt.Printf("gateway: %d workers behind %s\n", cl.Size()-1, ln.Addr())
	return Gateway(ctx, cl, ln)
}

func main() {
	listen := flag.String("listen", "127.0.0.1:7000", "address to serve")
	ranks := flag.Int("ranks", 2, "ranks to start as goroutines when not run under a launcher")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	if os.Getenv("PMI_FD") != "" || os.Getenv("PMI_PORT") != "" || os.Getenv("PMI_RANK") != "" {
		var cl *amigo.Client
		if cl, err = amigo.Open(context.Background(), amigo.Config{}); err == nil {
			err = rank(ctx, cl, *listen)
			cl.Close()
		}
	} else {
		err = inProcess(ctx, *ranks, *listen)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

// inProcess runs n ranks as goroutines of this process.
func inProcess(ctx context.Context, n int, listen string) error {
	cls, err := amigo.NewLocal(n, amigo.Config{})
	if err != nil {
		return err
	}
	defer func() {
		for _, c := range cls {
			c.Close()
		}
	}()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, cl := range cls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = rank(ctx, cl, listen)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
