// Package tcptest helps test programs over amigo's TCP adapter: a proxy
// that forwards a rank's connections and can cut them (mid-message) or
// silence them, and a bootstrap job that publishes a proxy in place of a
// rank's own address.
package tcptest

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"github.com/amigo-hpc/amigo/bootstrap"
	"github.com/amigo-hpc/amigo/transport/tcp"
)

// Proxy forwards every connection it accepts to a target address.
type Proxy struct {
	ln     net.Listener
	target string

	fwd    atomic.Int64 // bytes forwarded toward the target
	cutAt  atomic.Int64 // cut once fwd reaches it (0: never)
	silent atomic.Bool

	mu     sync.Mutex
	conns  []net.Conn
	closed bool
	wg     sync.WaitGroup
}

// NewProxy listens on 127.0.0.1 and forwards to target.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the address to reach the target through the proxy.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Forwarded returns the bytes forwarded toward the target so far.
func (p *Proxy) Forwarded() int64 { return p.fwd.Load() }

// CutAfter makes the proxy reset every connection, both ways, once n bytes
// in all went toward the target: wherever that falls, mid-message most
// likely.
func (p *Proxy) CutAfter(n int64) {
	p.cutAt.Store(n)
	if p.fwd.Load() >= n {
		p.Cut()
	}
}

// Cut resets every connection now, both ways, as a broken link or a
// crashed host would.
func (p *Proxy) Cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0) // close with RST
		}
		c.Close()
	}
}

// Silence stops forwarding in both directions, closes included, and keeps
// the connections open, as a hung host or a network that drops everything
// would.
func (p *Proxy) Silence() { p.silent.Store(true) }

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			in.Close()
			out.Close()
			return
		}
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(out, in, true)
		go p.pipe(in, out, false)
	}
}

func (p *Proxy) pipe(dst, src net.Conn, toward bool) {
	defer p.wg.Done()
	buf := make([]byte, 16<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.silent.Load() {
			b := buf[:n]
			if toward {
				if at := p.cutAt.Load(); at > 0 {
					sent := p.fwd.Load()
					if sent+int64(n) >= at {
						b = b[:max(0, at-sent)]
					}
				}
			}
			if _, werr := dst.Write(b); werr != nil {
				return
			}
			if toward {
				total := p.fwd.Add(int64(len(b)))
				if at := p.cutAt.Load(); at > 0 && total >= at {
					p.Cut()
					return
				}
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) || p.silent.Load() {
				return
			}
			if tc, ok := dst.(*net.TCPConn); ok {
				tc.CloseWrite()
			}
			return
		}
	}
}

// Job is a bootstrap job whose rank reaches one peer, over the TCP
// adapter, through a proxy: the address it reads for that peer is the
// proxy's. Only the connections this rank makes to that peer go through
// it; the peer's connections to this rank do not.
type Job struct {
	bootstrap.Job
	to    int
	mu    sync.Mutex
	proxy *Proxy
	ready chan struct{}
}

// Route wraps job so that its connections to rank to go through a proxy.
func Route(job bootstrap.Job, to int) *Job {
	return &Job{Job: job, to: to, ready: make(chan struct{})}
}

// Get returns what rank published, or a proxy's address in place of the
// routed peer's TCP address.
func (j *Job) Get(ctx context.Context, rank int, key string) ([]byte, error) {
	v, err := j.Job.Get(ctx, rank, key)
	if err != nil || rank != j.to || key != tcp.KVSKey {
		return v, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.proxy == nil {
		p, err := NewProxy(string(v))
		if err != nil {
			return nil, err
		}
		j.proxy = p
		close(j.ready)
	}
	return []byte(j.proxy.Addr()), nil
}

// Proxy returns the proxy, waiting until the adapter asked for the peer's
// address.
func (j *Job) Proxy() *Proxy {
	<-j.ready
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.proxy
}
