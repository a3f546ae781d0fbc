// Package bootstraptest holds a rank program for testing launchers: every
// rank joins the job through package bootstrap, publishes an address and a
// large value through the job's KVS, then opens an amigo client over the job
// (shared memory with the ranks of its host, TCP with the others) and
// exchanges an active message with every other rank, each proving that it
// knows the job's secret.
//
// Tests run it by making their own test binary impersonate a rank (the
// os/exec pattern): TestMain calls RunIfRank, and the test starts the binary
// under mpiexec, srun or amirun with RankEnv set.
package bootstraptest

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/amigo-hpc/amigo"
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

// Main is the rank program. It prints two lines on success:
//
//	rank R/N node X pmiP at ADDR: exchanged with N-1 peers
//	rank R: messages over amigo adapters loop,shm,...
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
	addr, err := Address(j)
	var adapters []string
	if err == nil {
		adapters, err = Exchange(ctx, j, addr)
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
	fmt.Printf("rank %d/%d node %d %s at %s: exchanged with %d peers\n", j.Rank(), j.Size(), j.Node(j.Rank()), proto, FormatAddr(addr), j.Size()-1)
	fmt.Printf("rank %d: messages over amigo adapters %s\n", j.Rank(), strings.Join(adapters, ","))
	if err := j.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "exchange: rank %d: close: %v\n", j.Rank(), err)
		return 1
	}
	return 0
}

// Dispatch ids of the exchange.
const (
	helloID amigo.Dispatch = 1
	ackID   amigo.Dispatch = 2
)

// Exchange publishes addr under "addr" and a large value under "blob",
// opens an amigo client over the job, checks every peer's values, and then
// sends every other rank p "hello from R to p <proof>" and expects "ack from
// p to R" back, while answering the Size-1 hellos sent to it, checking that
// each proves knowledge of the job secret. It returns the names of the
// client's adapters.
func Exchange(ctx context.Context, j bootstrap.Job, addr []byte) ([]string, error) {
	if err := j.Put("addr", addr); err != nil {
		return nil, err
	}
	// A value several times the launchers' 1024-byte limit, which the
	// KVS layer splits across keys.
	if err := j.Put("blob", Blob(j.Rank())); err != nil {
		return nil, err
	}
	// OpenJob publishes the adapters' addresses and fences.
	c, err := amigo.OpenJob(ctx, j, amigo.Config{})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	me, n := j.Rank(), j.Size()
	var errs []error
	for p := 0; p < n; p++ {
		if _, err := j.Get(ctx, p, "addr"); err != nil {
			errs = append(errs, err)
		}
		if b, err := j.Get(ctx, p, "blob"); err != nil || string(b) != string(Blob(p)) {
			errs = append(errs, fmt.Errorf("blob of rank %d: %d bytes, %v", p, len(b), err))
		}
	}
	proof := secretProof(j.Secret())
	x := c.Context(0)
	k := amigo.NewCounter()
	served, acked := 0, 0
	fail := func(err error) { errs = append(errs, err) }
	x.SetDispatch(helloID, func(x *amigo.Context, m *amigo.Message) {
		var from, to int
		var pr string
		if _, err := fmt.Sscanf(string(m.Data), "hello from %d to %d %s", &from, &to, &pr); err != nil || from != m.Source.Rank {
			fail(fmt.Errorf("bad message %q from rank %d", m.Data, m.Source.Rank))
			return
		}
		if to != me || pr != proof {
			fail(fmt.Errorf("message %q is not for rank %d of this job", m.Data, me))
			return
		}
		served++
		k.Add(1)
		if err := x.Send(m.Source, ackID, nil, fmt.Appendf(nil, "ack from %d to %d", me, from), k.Done()); err != nil {
			fail(err)
		}
	})
	x.SetDispatch(ackID, func(x *amigo.Context, m *amigo.Message) {
		if want := fmt.Sprintf("ack from %d to %d", m.Source.Rank, me); string(m.Data) != want {
			fail(fmt.Errorf("rank %d replied %q, want %q", m.Source.Rank, m.Data, want))
			return
		}
		acked++
	})
	// Every handler is in place before anyone sends.
	if err := j.Fence(ctx); err != nil {
		return nil, err
	}
	for i := 1; i < n; i++ {
		p := (me + i) % n // spread the load: rank r calls r+1 first
		k.Add(1)
		if err := x.Send(amigo.EndpointOf(p), helloID, nil, fmt.Appendf(nil, "hello from %d to %d %s", me, p, proof), k.Done()); err != nil {
			errs = append(errs, err)
		}
	}
	err = x.Wait(ctx, func() bool { return served >= n-1 && acked >= n-1 && k.Pending() == 0 || len(errs) > 0 })
	if err != nil {
		errs = append(errs, fmt.Errorf("waiting for peers (served %d, acknowledged %d of %d): %w", served, acked, n-1, err))
	}
	if err := k.Err(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	// Nobody leaves before everyone has been served.
	if err := j.Fence(ctx); err != nil {
		return nil, err
	}
	return c.Adapters(), nil
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

// Address returns the address a rank publishes: an IP on which the other
// ranks can reach this host (IPEnv if set; else, under a PMI_PORT launcher,
// the local address of the route to it; else 127.0.0.1) and this process's
// id as the port.
func Address(j bootstrap.Job) ([]byte, error) {
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
	if ip4 := ip.To4(); ip4 != nil {
		ip = ip4
	}
	return binary.BigEndian.AppendUint16(append([]byte(nil), ip...), uint16(os.Getpid())), nil
}

// FormatAddr renders a published address (IP bytes, then a 2-byte number).
func FormatAddr(a []byte) string {
	if len(a) != 6 && len(a) != 18 {
		return fmt.Sprintf("bad address %x", a)
	}
	ip := net.IP(a[:len(a)-2])
	return net.JoinHostPort(ip.String(), strconv.Itoa(int(binary.BigEndian.Uint16(a[len(a)-2:]))))
}
