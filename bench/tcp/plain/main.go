// Command plain is the baseline amigo's TCP adapter is measured against: two
// processes exchanging bytes over one TCP connection with nothing in between,
// written as well as plain Go allows.
//
//   - latency: a ping-pong of size-byte messages; each side busy-polls its
//     non-blocking socket (a syscall.RawConn read loop that never parks on the
//     netpoller) and answers at once. One-way latency is half the round trip.
//   - bw: windows of 64 size-byte messages, the receiver answering each window
//     with one byte, as the OSU bandwidth test does; the receiver reads into
//     its buffer with plain blocking reads.
//
// Run bare, it starts its peer itself (the same binary, re-executed) and
// connects to it over 127.0.0.1; with -listen and -connect the two sides run
// wherever one likes (two hosts, two network namespaces).
//
// Output is one JSON object per line, like amibench -json.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

type options struct {
	benchmarks []string
	minSize    int
	maxSize    int
	iterations int
	window     int
}

func main() {
	var o options
	bench := flag.String("b", "latency,bw", "benchmarks: latency, bw")
	flag.IntVar(&o.minSize, "min-size", 0, "smallest message size in bytes")
	flag.IntVar(&o.maxSize, "max-size", 4<<20, "largest message size in bytes")
	flag.IntVar(&o.iterations, "iterations", 0, "iterations per size (0: OSU's defaults)")
	flag.IntVar(&o.window, "window", 64, "messages per bandwidth window")
	flag.StringVar(&waiter, "waiter", "", "also keep, in both processes, a goroutine parked on Go's network poller (accept) or a 1ms ticker (timer), as most programs have: shows what a socket on the runtime's poller costs a busy-polling ping-pong")
	listen := flag.String("listen", "", "be the answering side: listen on this address")
	connect := flag.String("connect", "", "be the measuring side: connect to this address")
	flag.Parse()
	o.benchmarks = strings.Split(*bench, ",")
	startWaiter()
	var err error
	switch {
	case *listen != "":
		err = serve(*listen, o, nil)
	case *connect != "":
		var c *net.TCPConn
		if c, err = dial(*connect); err == nil {
			err = measure(c, o, os.Stdout)
		}
	default:
		err = both(o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "plain:", err)
		os.Exit(1)
	}
}

var waiter string

// startWaiter starts what -waiter asks for.
func startWaiter() {
	switch waiter {
	case "accept":
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err == nil {
			go l.Accept()
		}
	case "timer":
		go func() {
			for range time.Tick(time.Millisecond) {
			}
		}()
	}
}

const childEnv = "AMIGO_PLAIN_CHILD"

// both runs the answering side in a child process and measures against it.
func both(o options) error {
	if os.Getenv(childEnv) != "" {
		return serve("127.0.0.1:0", o, os.Stdout)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, os.Args[1:]...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer cmd.Wait()
	var addr string
	if _, err := fmt.Fscanln(out, &addr); err != nil {
		cmd.Process.Kill()
		return fmt.Errorf("child address: %v", err)
	}
	c, err := dial(addr)
	if err != nil {
		cmd.Process.Kill()
		return err
	}
	return measure(c, o, os.Stdout)
}

func dial(addr string) (*net.TCPConn, error) {
	var err error
	for i := 0; i < 100; i++ {
		var c net.Conn
		if c, err = net.Dial("tcp", addr); err == nil {
			tc := c.(*net.TCPConn)
			tc.SetNoDelay(true)
			return tc, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, err
}

// serve accepts one connection and answers the benchmarks. If announce is
// not nil, the listening address is printed on it first.
func serve(addr string, o options, announce io.Writer) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	if announce != nil {
		fmt.Fprintln(announce, l.Addr())
	}
	c, err := l.Accept()
	l.Close()
	if err != nil {
		return err
	}
	tc := c.(*net.TCPConn)
	tc.SetNoDelay(true)
	defer tc.Close()
	rc, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	buf := make([]byte, o.maxSize)
	for _, b := range o.benchmarks {
		switch strings.TrimSpace(b) {
		case "latency":
			for _, size := range sizes(o) {
				iters, warm := osuIterations(size, o, 10000, 1000, 100, 10)
				for i := 0; i < iters+warm; i++ {
					if err := spinRead(rc, buf[:size]); err != nil {
						return err
					}
					if _, err := tc.Write(buf[:size]); err != nil {
						return err
					}
				}
			}
		case "bw":
			for _, size := range sizes(o) {
				if size == 0 {
					continue
				}
				iters, warm := osuIterations(size, o, 100, 20, 10, 2)
				for i := 0; i < iters+warm; i++ {
					for j := 0; j < o.window; j++ {
						if _, err := io.ReadFull(tc, buf[:size]); err != nil {
							return err
						}
					}
					if _, err := tc.Write(buf[:1]); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// spinRead fills b from the socket without ever parking: it retries the
// non-blocking read until the bytes are there.
func spinRead(rc syscall.RawConn, b []byte) error {
	got := 0
	var rerr error
	err := rc.Read(func(fd uintptr) bool {
		for got < len(b) {
			n, err := syscall.Read(int(fd), b[got:])
			if err == syscall.EAGAIN || err == syscall.EINTR {
				continue
			}
			if err != nil {
				rerr = err
				return true
			}
			if n == 0 {
				rerr = io.ErrUnexpectedEOF
				return true
			}
			got += n
		}
		return true
	})
	if err != nil {
		return err
	}
	return rerr
}

func measure(c *net.TCPConn, o options, w io.Writer) error {
	defer c.Close()
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	buf := make([]byte, o.maxSize)
	for i := range buf {
		buf[i] = byte(i)
	}
	emit := func(m map[string]any) {
		m["impl"] = "plain-go-tcp"
		if waiter != "" {
			m["impl"] = "plain-go-tcp+" + waiter
		}
		b, _ := json.Marshal(m)
		fmt.Fprintln(w, string(b))
	}
	for _, b := range o.benchmarks {
		switch strings.TrimSpace(b) {
		case "latency":
			for _, size := range sizes(o) {
				iters, warm := osuIterations(size, o, 10000, 1000, 100, 10)
				var start time.Time
				for i := 0; i < iters+warm; i++ {
					if i == warm {
						start = time.Now()
					}
					if _, err := c.Write(buf[:size]); err != nil {
						return err
					}
					if err := spinRead(rc, buf[:size]); err != nil {
						return err
					}
				}
				us := float64(time.Since(start).Nanoseconds()) / 1e3 / float64(iters) / 2
				emit(map[string]any{"benchmark": "latency", "size": size, "latency_us": round(us)})
			}
		case "bw":
			for _, size := range sizes(o) {
				if size == 0 {
					continue
				}
				iters, warm := osuIterations(size, o, 100, 20, 10, 2)
				var start time.Time
				for i := 0; i < iters+warm; i++ {
					if i == warm {
						start = time.Now()
					}
					for j := 0; j < o.window; j++ {
						if _, err := c.Write(buf[:size]); err != nil {
							return err
						}
					}
					var ack [1]byte
					if _, err := io.ReadFull(c, ack[:]); err != nil {
						return err
					}
				}
				mbs := float64(size) * float64(iters*o.window) / time.Since(start).Seconds() / 1e6
				emit(map[string]any{"benchmark": "bw", "size": size, "mb_per_s": round(mbs)})
			}
		default:
			return errors.New("unknown benchmark " + b)
		}
	}
	return nil
}

func sizes(o options) []int {
	var out []int
	if o.minSize == 0 {
		out = append(out, 0)
	}
	for s := 1; s <= o.maxSize; s *= 2 {
		if s >= o.minSize {
			out = append(out, s)
		}
	}
	return out
}

// osuIterations returns OSU's iteration and warm-up counts for a size, as
// amibench uses them.
func osuIterations(size int, o options, small, large, warmSmall, warmLarge int) (int, int) {
	iters, warm := small, warmSmall
	if size > 8192 {
		iters, warm = large, warmLarge
	}
	if o.iterations > 0 {
		iters = o.iterations
	}
	return iters, warm
}

func round(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }
