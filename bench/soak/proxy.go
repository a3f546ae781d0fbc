package main

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Toxics are the faults a proxy applies to every byte it forwards, in both
// directions, until changed.
type Toxics struct {
	// Latency delays every chunk; Jitter adds a random delay up to itself.
	// Chunks keep their order whatever their delays.
	Latency, Jitter time.Duration
	// Bandwidth limits each direction of each connection, in bytes per
	// second (0: no limit).
	Bandwidth int
}

// Proxy listens on one address and forwards each connection it accepts to
// one target, injecting faults into it: the toxics of Toxics, stalls (no
// byte read or written for a while), half-closes and resets.
type Proxy struct {
	ln     *net.TCPListener
	target string

	toxics     atomic.Pointer[Toxics]
	stallUntil atomic.Int64 // unix nanoseconds; forwarding waits until then

	mu     sync.Mutex
	pairs  map[*pair]struct{}
	closed bool
	wg     sync.WaitGroup

	Accepted atomic.Int64 // connections accepted
	Bytes    atomic.Int64 // bytes forwarded, both directions
}

// pair is one proxied connection: client is the dialer's end, server the
// target's.
type pair struct {
	client, server *net.TCPConn
	halfClosed     atomic.Bool // client to server direction shut down
}

// chunk is data read from one side, due to be written to the other.
type chunk struct {
	b   []byte
	due time.Time
}

// NewProxy listens on listen ("127.0.0.1:0" picks a port) and forwards to
// target.
func NewProxy(listen, target string) (*Proxy, error) {
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: l.(*net.TCPListener), target: target, pairs: map[*pair]struct{}{}}
	p.toxics.Store(&Toxics{})
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetToxics replaces the toxics; chunks already read keep their delays.
func (p *Proxy) SetToxics(t Toxics) { p.toxics.Store(&t) }

// Stall stops all forwarding, in both directions and on connections made
// meanwhile, for d: nothing is read, so the senders' socket buffers fill.
func (p *Proxy) Stall(d time.Duration) { p.stallUntil.Store(time.Now().Add(d).UnixNano()) }

// HalfClose shuts down the client-to-server direction of every connection:
// the target reads end of file while the dialer can still write (into the
// void) and read.
func (p *Proxy) HalfClose() int {
	n := 0
	for _, pr := range p.snapshot() {
		if !pr.halfClosed.Swap(true) {
			_ = pr.server.CloseWrite()
			n++
		}
	}
	return n
}

// Reset aborts every connection with a TCP reset to both ends.
func (p *Proxy) Reset() int {
	ps := p.snapshot()
	for _, pr := range ps {
		pr.abort()
	}
	return len(ps)
}

// Close stops accepting, resets every connection and waits for the
// forwarding goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.Reset()
	p.wg.Wait()
}

func (p *Proxy) snapshot() []*pair {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*pair, 0, len(p.pairs))
	for pr := range p.pairs {
		out = append(out, pr)
	}
	return out
}

func (pr *pair) abort() {
	_ = pr.client.SetLinger(0)
	_ = pr.server.SetLinger(0)
	pr.client.Close()
	pr.server.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.AcceptTCP()
		if err != nil {
			return
		}
		p.Accepted.Add(1)
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = c.SetLinger(0)
			c.Close()
			continue
		}
		pr := &pair{client: c, server: s.(*net.TCPConn)}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			pr.abort()
			return
		}
		p.pairs[pr] = struct{}{}
		p.mu.Unlock()
		var both sync.WaitGroup
		both.Add(2)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			both.Wait()
			pr.client.Close()
			pr.server.Close()
			p.mu.Lock()
			delete(p.pairs, pr)
			p.mu.Unlock()
		}()
		p.pump(pr, pr.client, pr.server, true, &both)
		p.pump(pr, pr.server, pr.client, false, &both)
	}
}

// pump forwards src to dst on two goroutines, a reader that stamps each
// chunk with its due time and a writer that waits for it, so that latency
// does not limit throughput.
func (p *Proxy) pump(pr *pair, src, dst *net.TCPConn, toServer bool, both *sync.WaitGroup) {
	ch := make(chan chunk, 64)
	var readErr error // written before ch is closed
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		defer close(ch)
		var last time.Time
		for {
			p.waitStall()
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				t := p.toxics.Load()
				due := time.Now().Add(t.Latency)
				if t.Jitter > 0 {
					due = due.Add(rand.N(t.Jitter))
				}
				if due.Before(last) {
					due = last
				}
				last = due
				ch <- chunk{b: buf[:n], due: due}
			}
			if err != nil {
				readErr = err
				return
			}
		}
	}()
	go func() {
		defer p.wg.Done()
		defer both.Done()
		for c := range ch {
			if d := time.Until(c.due); d > 0 {
				time.Sleep(d)
			}
			p.waitStall()
			if toServer && pr.halfClosed.Load() {
				continue // the target was told end of file: drop
			}
			if _, err := dst.Write(c.b); err != nil {
				pr.abort()
				for range ch {
				}
				return
			}
			p.Bytes.Add(int64(len(c.b)))
			if bw := p.toxics.Load().Bandwidth; bw > 0 {
				time.Sleep(time.Duration(len(c.b)) * time.Second / time.Duration(bw))
			}
		}
		// The source ended: pass end of file on, or the reset.
		if errors.Is(readErr, io.EOF) {
			_ = dst.CloseWrite()
		} else {
			pr.abort()
		}
	}()
}

// waitStall returns once no stall is in force.
func (p *Proxy) waitStall() {
	for {
		d := time.Until(time.Unix(0, p.stallUntil.Load()))
		if d <= 0 {
			return
		}
		time.Sleep(min(d, 20*time.Millisecond))
	}
}
