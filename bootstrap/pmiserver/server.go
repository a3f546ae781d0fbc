// Package pmiserver is the launcher side of PMI: a key-value space with
// fences (barriers) for the ranks of one job, served over the PMI-1 line
// protocol and the PMI-2 framed protocol, whichever each rank's init line
// asks for. amirun uses it, and tests use it as a well-behaved launcher.
//
// A put becomes visible, even to the rank that made it, when the fence that
// follows it completes on all ranks — the strictest of the launchers' rules
// (Slurm's), so that programs that pass here pass everywhere.
package pmiserver

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/amigo-hpc/amigo/bootstrap/internal/pmiwire"
)

// Config describes the job a Server serves.
type Config struct {
	// Size is the number of ranks; required.
	Size int
	// KVSName is the PMI-1 KVS name and the PMI-2 job id; empty means a
	// random one.
	KVSName string
	// ProcessMapping is the value of PMI_process_mapping (see
	// bootstrap/internal/pmiwire.FormatProcessMapping); empty means the
	// attribute is absent.
	ProcessMapping string
	// KeyMax and ValMax are the longest key and value accepted and reported
	// by get_maxes; zero means 64 and 1024, as Hydra and Slurm.
	KeyMax, ValMax int
	// LeftJustify pads PMI-2 lengths on the right, as Slurm does
	// ("38    "); otherwise they are right-justified, as Hydra does.
	LeftJustify bool
	// OnAbort is called (from a connection's goroutine) when a rank asks
	// to abort the job.
	OnAbort func(rank, code int, msg string)
	// Logf, if set, receives one line per protocol problem.
	Logf func(format string, args ...any)
}

// Server serves one job's ranks. Its methods are safe for concurrent use.
type Server struct {
	cfg Config

	mu        sync.Mutex
	pending   map[string]string // puts since the last fence
	kvs       map[string]string // fenced puts
	arrived   int
	in        []bool // rank has entered the current fence
	lost      []bool // rank lost by the launcher (Lost)
	nlost     int
	gen       chan struct{} // closed when the current fence completes
	done      chan struct{} // closed by Close
	closed    bool
	bound     []bool // rank has a connection
	spoke     []bool // rank has sent a PMI request
	finalized []bool
	conns     map[net.Conn]struct{}
	listeners []net.Listener
	wg        sync.WaitGroup
}

// ErrClosed is returned by Serve after Close.
var ErrClosed = errors.New("pmiserver: closed")

// New returns a Server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Size < 1 || cfg.Size > 1<<20 {
		return nil, fmt.Errorf("pmiserver: size %d out of range", cfg.Size)
	}
	if cfg.KeyMax == 0 {
		cfg.KeyMax = 64
	}
	if cfg.ValMax == 0 {
		cfg.ValMax = 1024
	}
	if cfg.KVSName == "" {
		var b [6]byte
		rand.Read(b[:])
		cfg.KVSName = "amigo-" + hex.EncodeToString(b[:])
	}
	return &Server{
		cfg:       cfg,
		pending:   map[string]string{},
		kvs:       map[string]string{},
		gen:       make(chan struct{}),
		done:      make(chan struct{}),
		bound:     make([]bool, cfg.Size),
		spoke:     make([]bool, cfg.Size),
		finalized: make([]bool, cfg.Size),
		in:        make([]bool, cfg.Size),
		lost:      make([]bool, cfg.Size),
		conns:     map[net.Conn]struct{}{},
	}, nil
}

// KVSName is the job's KVS name (PMI-1) and job id (PMI-2).
func (s *Server) KVSName() string { return s.cfg.KVSName }

// Connected reports whether rank has opened its PMI connection (and so
// is expected to finalize before it exits).
func (s *Server) Connected(rank int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return rank >= 0 && rank < len(s.spoke) && s.spoke[rank]
}

// ProcessMapping encodes the host index of each rank as a
// PMI_process_mapping value, e.g. [0 0 1 1] as "(vector,(0,2,2))".
func ProcessMapping(nodes []int) string { return pmiwire.FormatProcessMapping(nodes) }

// Finalized reports whether rank has sent finalize.
func (s *Server) Finalized(rank int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return rank >= 0 && rank < len(s.finalized) && s.finalized[rank]
}

// Serve accepts PMI_PORT connections on l until Close; ranks identify
// themselves with initack (PMI-1) or fullinit (PMI-2).
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return ErrClosed
	}
	s.listeners = append(s.listeners, l)
	s.mu.Unlock()
	for {
		c, err := l.Accept()
		if err != nil {
			select {
			case <-s.done:
				return ErrClosed
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		go s.ServeConn(c, -1)
	}
}

// ServeConn serves one rank's connection until it closes or the server
// does, then closes it. rank is the rank on the other end if known (PMI_FD),
// or -1 if it will identify itself (PMI_PORT).
func (s *Server) ServeConn(c net.Conn, rank int) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.Close()
		return ErrClosed
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.wg.Done()
	}()
	sc := &conn{s: s, c: c, r: bufio.NewReaderSize(c, 4096), rank: -1}
	if rank >= 0 {
		if err := sc.bind(rank); err != nil {
			return err
		}
	}
	err := sc.serve()
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		s.logf("pmiserver: rank %d: %v", sc.rank, err)
		return err
	}
	return nil
}

// Close stops the listeners, closes every connection (ranks waiting in a
// fence see the launcher go away) and waits for the connection goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.done)
		for _, l := range s.listeners {
			l.Close()
		}
		for c := range s.conns {
			c.Close()
		}
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

func (s *Server) logf(format string, args ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf(format, args...)
	}
}

// LostKey is the PMI key under which the server publishes the ranks the
// launcher lost (Lost): their numbers, comma-separated, in the order they
// were lost. It is readable at once, without a fence; absent while none
// was lost.
const LostKey = pmiwire.LostKey

// Lost tells the server that rank is gone for good, as a launcher that
// lets the job go on reports a rank it lost: fences stop waiting for it
// (the one in progress completes if it waited for it only), and the ranks
// find it under LostKey.
func (s *Server) Lost(rank int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rank < 0 || rank >= s.cfg.Size || s.lost[rank] {
		return
	}
	s.lost[rank] = true
	s.nlost++
	if v := s.kvs[LostKey]; v != "" {
		s.kvs[LostKey] = v + "," + strconv.Itoa(rank)
	} else {
		s.kvs[LostKey] = strconv.Itoa(rank)
	}
	if s.in[rank] {
		s.in[rank] = false
		s.arrived--
	}
	if s.arrived > 0 && s.arrived == s.cfg.Size-s.nlost {
		s.completeFence()
	}
}

// completeFence publishes the pending puts and releases the fence's
// waiters. The caller holds s.mu.
func (s *Server) completeFence() {
	for k, v := range s.pending {
		s.kvs[k] = v
	}
	s.pending = map[string]string{}
	s.arrived = 0
	clear(s.in)
	gen := s.gen
	s.gen = make(chan struct{})
	close(gen)
}

// fence blocks until all ranks not lost have entered the current fence,
// then publishes the pending puts. It fails if the server closes.
func (s *Server) fence(rank int) error {
	s.mu.Lock()
	gen := s.gen
	if rank >= 0 && rank < len(s.in) && !s.in[rank] && !s.lost[rank] {
		s.in[rank] = true
		s.arrived++
	}
	if s.arrived >= s.cfg.Size-s.nlost {
		s.completeFence()
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	select {
	case <-gen:
		return nil
	case <-s.done:
		return ErrClosed
	}
}

func (s *Server) put(key, value string) string {
	if len(key) == 0 || len(key) > s.cfg.KeyMax {
		return fmt.Sprintf("key of %d bytes exceeds keylen_max %d", len(key), s.cfg.KeyMax)
	}
	if len(value) > s.cfg.ValMax {
		return fmt.Sprintf("value of %d bytes exceeds vallen_max %d", len(value), s.cfg.ValMax)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending)+len(s.kvs) > 1<<20 {
		return "KVS full"
	}
	s.pending[key] = value
	return ""
}

func (s *Server) get(key string) (string, bool) {
	if key == "PMI_process_mapping" && s.cfg.ProcessMapping != "" {
		return s.cfg.ProcessMapping, true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.kvs[key]
	return v, ok
}

// conn is one rank's connection.
type conn struct {
	s    *Server
	c    net.Conn
	r    *bufio.Reader
	rank int
	buf  []byte
}

func (c *conn) bind(rank int) error {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if rank < 0 || rank >= s.cfg.Size {
		return fmt.Errorf("rank %d out of range [0,%d)", rank, s.cfg.Size)
	}
	if c.rank == rank {
		return nil
	}
	if c.rank >= 0 || s.bound[rank] {
		return fmt.Errorf("rank %d is already connected", rank)
	}
	s.bound[rank] = true
	c.rank = rank
	return nil
}

func (c *conn) write(b []byte) error {
	c.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := c.c.Write(b)
	return err
}

func (c *conn) readLine() ([]byte, error) {
	var line []byte
	for {
		frag, err := c.r.ReadSlice('\n')
		line = append(line, frag...)
		if err == bufio.ErrBufferFull && len(line) <= pmiwire.MaxMessage {
			continue
		}
		return line, err
	}
}

func (c *conn) serve() error {
	for {
		line, err := c.readLine()
		if err != nil {
			return err
		}
		m, err := pmiwire.ParseLine(line)
		if err != nil {
			return err
		}
		if m.Cmd == "init" {
			if v, _ := m.Get("pmi_version"); v == "2" {
				if err := c.write([]byte("cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0\n")); err != nil {
					return err
				}
				return c.serve2()
			}
		}
		if err := c.handle1(m); err != nil {
			return err
		}
	}
}

func (c *conn) reply1(cmd string, args ...pmiwire.KV) error {
	var err error
	c.buf, err = pmiwire.AppendLine(c.buf[:0], pmiwire.Msg{Cmd: cmd, Args: args})
	if err != nil {
		return err
	}
	return c.write(c.buf)
}

func kv(k, v string) pmiwire.KV { return pmiwire.KV{Key: k, Value: v} }

func (c *conn) needRank() error {
	if c.rank < 0 {
		return errors.New("PMI request before the rank identified itself")
	}
	c.s.mu.Lock()
	c.s.spoke[c.rank] = true
	c.s.mu.Unlock()
	return nil
}

// handle1 serves one PMI-1 request.
func (c *conn) handle1(m pmiwire.Msg) error {
	s := c.s
	switch m.Cmd {
	case "initack":
		id, err := strconv.Atoi(first(m.Get("pmiid")))
		if err != nil {
			return fmt.Errorf("initack without a numeric pmiid: %s", m)
		}
		if err := c.bind(id); err != nil {
			return err
		}
		for _, l := range [][]pmiwire.KV{nil, {kv("size", strconv.Itoa(s.cfg.Size))}, {kv("rank", strconv.Itoa(id))}, {kv("debug", "0")}} {
			cmd := "set"
			if l == nil {
				cmd, l = "initack", []pmiwire.KV{kv("rc", "0")}
			}
			if err := c.reply1(cmd, l...); err != nil {
				return err
			}
		}
		return nil
	case "init":
		return c.reply1("response_to_init", kv("pmi_version", "1"), kv("pmi_subversion", "1"), kv("rc", "0"))
	}
	if err := c.needRank(); err != nil {
		return err
	}
	switch m.Cmd {
	case "get_maxes":
		return c.reply1("maxes", kv("rc", "0"), kv("kvsname_max", "256"),
			kv("keylen_max", strconv.Itoa(s.cfg.KeyMax)), kv("vallen_max", strconv.Itoa(s.cfg.ValMax)))
	case "get_my_kvsname":
		return c.reply1("my_kvsname", kv("rc", "0"), kv("kvsname", s.cfg.KVSName))
	case "get_universe_size":
		return c.reply1("universe_size", kv("rc", "0"), kv("size", strconv.Itoa(s.cfg.Size)))
	case "get_appnum":
		return c.reply1("appnum", kv("rc", "0"), kv("appnum", "0"))
	case "put":
		k, _ := m.Get("key")
		v, _ := m.Get("value")
		if msg := s.put(k, v); msg != "" {
			return c.reply1("put_result", kv("rc", "-1"), kv("msg", sanitize(msg)))
		}
		return c.reply1("put_result", kv("rc", "0"), kv("msg", "success"))
	case "get":
		k, _ := m.Get("key")
		if v, ok := s.get(k); ok {
			return c.reply1("get_result", kv("rc", "0"), kv("msg", "success"), kv("value", v))
		}
		return c.reply1("get_result", kv("rc", "-1"), kv("msg", sanitize("key_"+k+"_not_found")), kv("value", "unknown"))
	case "barrier_in":
		if err := s.fence(c.rank); err != nil {
			return err
		}
		return c.reply1("barrier_out", kv("rc", "0"))
	case "finalize":
		c.finalize()
		return c.reply1("finalize_ack", kv("rc", "0"))
	case "abort":
		code, _ := strconv.Atoi(first(m.Get("exitcode")))
		if s.cfg.OnAbort != nil {
			s.cfg.OnAbort(c.rank, code, "")
		}
		return nil
	}
	s.logf("pmiserver: rank %d: unknown PMI-1 command %s", c.rank, m)
	return c.reply1("error", kv("rc", "-1"), kv("msg", sanitize("unknown_command_"+m.Cmd)))
}

func (c *conn) finalize() {
	c.s.mu.Lock()
	c.s.finalized[c.rank] = true
	c.s.mu.Unlock()
}

func (c *conn) reply2(cmd string, args ...pmiwire.KV) error {
	j := pmiwire.Right
	if c.s.cfg.LeftJustify {
		j = pmiwire.Left
	}
	var err error
	c.buf, err = pmiwire.AppendFrame(c.buf[:0], pmiwire.Msg{Cmd: cmd, Args: args}, j)
	if err != nil {
		return err
	}
	return c.write(c.buf)
}

// serve2 serves PMI-2 frames until the connection ends.
func (c *conn) serve2() error {
	s := c.s
	var h [pmiwire.HeaderLen]byte
	for {
		if _, err := io.ReadFull(c.r, h[:]); err != nil {
			return err
		}
		n, err := pmiwire.ParseHeader(h[:])
		if err != nil {
			return err
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(c.r, body); err != nil {
			return err
		}
		m, err := pmiwire.ParseBody(body)
		if err != nil {
			return err
		}
		resp := m.Cmd + "-response"
		ok := kv("rc", "0")
		if m.Cmd != "fullinit" {
			if err := c.needRank(); err != nil {
				return err
			}
		}
		switch m.Cmd {
		case "fullinit":
			id := first(m.Get("pmiid"))
			if id == "" {
				id = first(m.Get("pmirank"))
			}
			r, err := strconv.Atoi(id)
			if err != nil {
				return fmt.Errorf("fullinit without a numeric pmirank: %s", m)
			}
			if err := c.bind(r); err != nil {
				return err
			}
			c.needRank()
			err = c.reply2(resp, ok, kv("pmi-version", "2"), kv("pmi-subversion", "0"),
				kv("rank", strconv.Itoa(c.rank)), kv("size", strconv.Itoa(s.cfg.Size)), kv("appnum", "0"),
				kv("debugged", "FALSE"), kv("pmiverbose", "FALSE"))
		case "job-getid":
			err = c.reply2(resp, ok, kv("jobid", s.cfg.KVSName))
		case "kvs-put":
			k, _ := m.Get("key")
			v, _ := m.Get("value")
			if msg := s.put(k, v); msg != "" {
				err = c.reply2(resp, kv("rc", "-1"), kv("errmsg", msg))
			} else {
				err = c.reply2(resp, ok)
			}
		case "kvs-get":
			k, _ := m.Get("key")
			if v, found := s.get(k); found {
				err = c.reply2(resp, ok, kv("found", "TRUE"), kv("value", v))
			} else {
				err = c.reply2(resp, ok, kv("found", "FALSE"))
			}
		case "info-getjobattr":
			k, _ := m.Get("key")
			if k == "PMI_process_mapping" && s.cfg.ProcessMapping != "" {
				err = c.reply2(resp, ok, kv("found", "TRUE"), kv("value", s.cfg.ProcessMapping))
			} else {
				err = c.reply2(resp, ok, kv("found", "FALSE"))
			}
		case "kvs-fence":
			if err = s.fence(c.rank); err == nil {
				err = c.reply2(resp, ok)
			}
		case "finalize":
			c.finalize()
			err = c.reply2(resp, ok)
		case "abort":
			if s.cfg.OnAbort != nil {
				msg, _ := m.Get("msg")
				s.cfg.OnAbort(c.rank, abortCode(msg), msg)
			}
		default:
			s.logf("pmiserver: rank %d: unknown PMI-2 command %s", c.rank, m)
			err = c.reply2(resp, kv("rc", "-1"), kv("errmsg", "unknown command"))
		}
		if err != nil {
			return err
		}
	}
}

func first(s string, _ bool) string { return s }

// abortCode recovers the exit code from amigo's PMI-2 abort message
// ("exit code N: why"); PMI-2 has no field for it. Default 1.
func abortCode(msg string) int {
	var code int
	if _, err := fmt.Sscanf(msg, "exit code %d:", &code); err != nil || code == 0 {
		return 1
	}
	return code
}

// sanitize makes s a valid PMI-1 value (no blanks).
func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == 0 {
			b[i] = '_'
		}
	}
	return string(b)
}
