// Package bootstraptest holds a rank program for testing launchers: every
// rank publishes its address through the job's KVS, learns every other
// rank's address after a fence, and exchanges a message with each of them.
//
// Tests run it by making their own test binary impersonate a rank (the
// os/exec pattern): TestMain calls RunIfRank, and the test starts the binary
// under mpiexec, srun or amirun with RankEnv set.
//
// The message travels over a plain TCP connection (Endpoint) until the core
// offers a cross-process client; switching is a new Endpoint.
package bootstraptest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/amigo-hpc/amigo/bootstrap"
)

// RankEnv, set to "exchange" in a process's environment, makes RunIfRank
// run the exchange program.
const RankEnv = "AMIGO_BOOTSTRAPTEST_RANK"

// IPEnv overrides the IP address a rank publishes.
const IPEnv = "AMIGO_BOOTSTRAPTEST_IP"

// RunIfRank runs the rank program and exits if RankEnv asks for it, and
// returns otherwise. Call it first thing in TestMain.
func RunIfRank() {
	if os.Getenv(RankEnv) != "exchange" {
		return
	}
	os.Exit(Main())
}

// Main is the rank program. It prints one line on success:
//
//	rank R/N node X pmiP at ADDR: exchanged with N-1 peers
//
// and on failure a message on stderr, aborts the job and returns 1.
func Main() int {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	j, err := bootstrap.Open(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "exchange: open: %v\n", err)
		return 1
	}
	ep, err := ListenTCP(j)
	if err == nil {
		err = Exchange(ctx, j, ep)
		defer ep.Close()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "exchange: rank %d: %v\n", j.Rank(), err)
		j.Abort(1, err.Error())
		return 1
	}
	proto := "?"
	if p, ok := j.(interface{ Protocol() string }); ok {
		proto = p.Protocol()
	}
	fmt.Printf("rank %d/%d node %d %s at %s: exchanged with %d peers\n", j.Rank(), j.Size(), j.Node(j.Rank()), proto, FormatAddr(ep.Address()), j.Size()-1)
	if err := j.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "exchange: rank %d: close: %v\n", j.Rank(), err)
		return 1
	}
	return 0
}

// Endpoint is how a rank is reached: an address to publish, and a way to
// send a message to a peer at its published address and get its reply.
type Endpoint interface {
	// Address is what this rank publishes in the KVS.
	Address() []byte
	// Call delivers msg to the peer at addr and returns the peer's reply.
	Call(ctx context.Context, addr []byte, msg []byte) ([]byte, error)
	// Serve answers n calls with reply(msg), then returns.
	Serve(ctx context.Context, n int, reply func(msg []byte) ([]byte, error)) error
	Close() error
}

// Exchange publishes ep's address under "addr", fences, and then for every
// other rank p sends "hello from R to p <proof>" to p and expects
// "ack from p to R"; meanwhile it answers the Size-1 messages sent to it,
// checking that each proves knowledge of the job secret.
func Exchange(ctx context.Context, j bootstrap.Job, ep Endpoint) error {
	if err := j.Put("addr", ep.Address()); err != nil {
		return err
	}
	// A value several times the launchers' 1024-byte limit, which the
	// KVS layer splits across keys.
	if err := j.Put("blob", Blob(j.Rank())); err != nil {
		return err
	}
	if err := j.Fence(ctx); err != nil {
		return err
	}
	me, n := j.Rank(), j.Size()
	proof := secretProof(j.Secret())
	served := make(chan error, 1)
	go func() {
		served <- ep.Serve(ctx, n-1, func(msg []byte) ([]byte, error) {
			var from, to int
			var p string
			if _, err := fmt.Sscanf(string(msg), "hello from %d to %d %s", &from, &to, &p); err != nil {
				return nil, fmt.Errorf("bad message %q", msg)
			}
			if to != me || p != proof {
				return nil, fmt.Errorf("message %q is not for rank %d of this job", msg, me)
			}
			return fmt.Appendf(nil, "ack from %d to %d", me, from), nil
		})
	}()
	var errs []error
	for k := 1; k < n; k++ {
		p := (me + k) % n // spread the load: rank r calls r+1 first
		addr, err := j.Get(ctx, p, "addr")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if b, err := j.Get(ctx, p, "blob"); err != nil || !bytes.Equal(b, Blob(p)) {
			errs = append(errs, fmt.Errorf("blob of rank %d: %d bytes, %v", p, len(b), err))
		}
		reply, err := ep.Call(ctx, addr, fmt.Appendf(nil, "hello from %d to %d %s", me, p, proof))
		if err != nil {
			errs = append(errs, fmt.Errorf("call rank %d at %s: %w", p, FormatAddr(addr), err))
			continue
		}
		if want := fmt.Sprintf("ack from %d to %d", p, me); string(reply) != want {
			errs = append(errs, fmt.Errorf("rank %d replied %q, want %q", p, reply, want))
		}
	}
	if err := <-served; err != nil {
		errs = append(errs, fmt.Errorf("serving peers: %w", err))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// Nobody leaves before everyone has been served.
	return j.Fence(ctx)
}

// BlobLen is the size of the large value each rank publishes.
const BlobLen = 5000

// Blob is the large binary value that rank r publishes.
func Blob(r int) []byte {
	b := make([]byte, BlobLen)
	for i := range b {
		b[i] = byte(i*131 + r*17 + i>>8)
	}
	return b
}

func secretProof(secret []byte) string {
	h := sha256.Sum256(append([]byte("amigo-bootstraptest:"), secret...))
	return hex.EncodeToString(h[:8])
}

// tcpEndpoint is an Endpoint over TCP, one connection per message.
type tcpEndpoint struct {
	l    net.Listener
	addr []byte
}

// ListenTCP listens on all interfaces and publishes an address that the
// other ranks can reach: IPEnv if set; else, under a PMI_PORT launcher, the
// local address of the route to it; else 127.0.0.1.
func ListenTCP(j bootstrap.Job) (Endpoint, error) {
	ip := net.IPv4(127, 0, 0, 1)
	if s := os.Getenv(IPEnv); s != "" {
		ip = net.ParseIP(s)
		if ip == nil {
			return nil, fmt.Errorf("%s=%q is not an IP address", IPEnv, s)
		}
	} else if port := os.Getenv("PMI_PORT"); port != "" {
		// A UDP "connection" sends nothing; it only picks the route.
		if c, err := net.Dial("udp", port); err == nil {
			ip = c.LocalAddr().(*net.UDPAddr).IP
			c.Close()
		}
	}
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		return nil, err
	}
	ep := &tcpEndpoint{l: l}
	if ip4 := ip.To4(); ip4 != nil {
		ip = ip4
	}
	ep.addr = binary.BigEndian.AppendUint16(append([]byte(nil), ip...), uint16(l.Addr().(*net.TCPAddr).Port))
	return ep, nil
}

// FormatAddr renders a published address (IP bytes, then a 2-byte port).
func FormatAddr(a []byte) string {
	if len(a) != 6 && len(a) != 18 {
		return fmt.Sprintf("bad address %x", a)
	}
	ip := net.IP(a[:len(a)-2])
	return net.JoinHostPort(ip.String(), strconv.Itoa(int(binary.BigEndian.Uint16(a[len(a)-2:]))))
}

func (e *tcpEndpoint) Address() []byte { return e.addr }
func (e *tcpEndpoint) Close() error    { return e.l.Close() }

func (e *tcpEndpoint) Call(ctx context.Context, addr, msg []byte) ([]byte, error) {
	if strings.HasPrefix(FormatAddr(addr), "bad") {
		return nil, errors.New(FormatAddr(addr))
	}
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := d.DialContext(dctx, "tcp", FormatAddr(addr))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(append(msg, '\n')); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(io.LimitReader(c, 1024)).ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("reading reply: %w", err)
	}
	return []byte(strings.TrimSuffix(line, "\n")), nil
}

func (e *tcpEndpoint) Serve(ctx context.Context, n int, reply func([]byte) ([]byte, error)) error {
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(30 * time.Second)
	}
	e.l.(*net.TCPListener).SetDeadline(dl)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		c, err := e.l.Accept()
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			c.SetDeadline(dl)
			line, err := bufio.NewReader(io.LimitReader(c, 1024)).ReadString('\n')
			if err != nil {
				errs <- err
				return
			}
			r, err := reply([]byte(strings.TrimSuffix(line, "\n")))
			if err != nil {
				errs <- err
				return
			}
			_, err = c.Write(append(r, '\n'))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		if err != nil {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}
