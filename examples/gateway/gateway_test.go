package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
)

// Clients of the gateway get each line back from the workers in turn, while
// rank 0 waits on the listener, the clients and amigo in one select.
func TestGateway(t *testing.T) {
	cls, err := amigo.NewLocal(3, amigo.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range cls {
			c.Close()
		}
	}()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make([]error, 3)
	wg.Add(3)
	go func() { defer wg.Done(); errs[0] = Gateway(ctx, cls[0], ln) }()
	for r := 1; r < 3; r++ {
		go func() { defer wg.Done(); errs[r] = Worker(context.Background(), cls[r]) }()
	}
	seen := map[string]int{}
	for k := 0; k < 2; k++ {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(30 * time.Second))
		r := bufio.NewScanner(conn)
		for i := 0; i < 5; i++ {
			fmt.Fprintf(conn, "hello %d.%d\n", k, i)
			if !r.Scan() {
				t.Fatalf("client %d line %d: no answer: %v", k, i, r.Err())
			}
			got := r.Text()
			var rank int
			var want = fmt.Sprintf("HELLO %d.%d", k, i)
			if _, err := fmt.Sscanf(got[len(want):], " (rank %d)", &rank); err != nil || got[:len(want)] != want {
				t.Fatalf("client %d line %d: answer %q", k, i, got)
			}
			seen[fmt.Sprint(rank)]++
		}
		fmt.Fprintf(conn, "%s\n", make([]byte, 300)) // too long: an error line, not a crash
		if !r.Scan() || r.Text()[:6] != "error:" {
			t.Fatalf("client %d: overlong line answered %q", k, r.Text())
		}
		conn.Close()
	}
	cancel()
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if seen["1"] != 5 || seen["2"] != 5 {
		t.Fatalf("answers by rank: %v, want 5 from each worker", seen)
	}
}
