package bootstrap

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/amigo-hpc/amigo/bootstrap/internal/pmiwire"
)

// pmi1 is a client of the PMI-1 ("simple PMI") line protocol.
type pmi1 struct {
	w    *wireConn
	cfg  *Config
	rank int
	size int

	kvsname string
	keyMax  int // longest key the launcher stores (keylen_max)
	valMax  int // longest value (vallen_max)
	lineMax int // longest request line we send (MPICH's own client: 1024)
	buf     []byte
}

// MPICH's simple PMI client builds every request in a 1024-byte buffer, so
// launchers need not accept longer lines; we keep within the same bound.
const pmi1LineMax = 1024

// openPMI1 runs the PMI-1 handshake on w. If port is true the connection came
// from PMI_PORT and the launcher learns who we are from initack with PMI_ID;
// otherwise rank and size come from PMI_RANK and PMI_SIZE.
func openPMI1(ctx context.Context, w *wireConn, cfg *Config, env func(string) string, port bool) (*pmi1, error) {
	p := &pmi1{w: w, cfg: cfg, rank: -1, size: -1, keyMax: 64, valMax: 1024, lineMax: pmi1LineMax}
	if port {
		id, err := envInt(env, "PMI_ID")
		if err != nil {
			return nil, err
		}
		if err := p.send(ctx, pmiwire.Msg{Cmd: "initack", Args: []pmiwire.KV{{Key: "pmiid", Value: strconv.Itoa(id)}}}); err != nil {
			return nil, err
		}
		if _, err := p.recv(ctx, "initack", cfg.RequestTimeout); err != nil {
			return nil, err
		}
		// Hydra then sends "cmd=set" lines for size, rank and debug.
		for got := 0; got < 3; got++ {
			m, err := p.recv(ctx, "set", cfg.RequestTimeout)
			if err != nil {
				return nil, err
			}
			if len(m.Args) != 1 {
				return nil, p.protocol("set", "want one key=value, got %s", m)
			}
			switch kv := m.Args[0]; kv.Key {
			case "size":
				p.size, err = atoiField("set", kv)
			case "rank":
				p.rank, err = atoiField("set", kv)
			case "debug":
			default:
				return nil, p.protocol("set", "unknown key in %s", m)
			}
			if err != nil {
				return nil, err
			}
		}
	} else {
		var err error
		if p.rank, err = envInt(env, "PMI_RANK"); err != nil {
			return nil, err
		}
		if p.size, err = envInt(env, "PMI_SIZE"); err != nil {
			return nil, err
		}
	}
	if p.size < 1 || p.size > MaxSize || p.rank < 0 || p.rank >= p.size {
		return nil, fmt.Errorf("%w: rank %d of size %d", ErrEnv, p.rank, p.size)
	}
	if _, err := p.call(ctx, pmiwire.Msg{Cmd: "init", Args: []pmiwire.KV{{Key: "pmi_version", Value: "1"}, {Key: "pmi_subversion", Value: "1"}}}, "response_to_init"); err != nil {
		return nil, err
	}
	return p, p.afterInit(ctx)
}

// afterInit reads the launcher's limits and the KVS name.
func (p *pmi1) afterInit(ctx context.Context) error {
	m, err := p.call(ctx, pmiwire.Msg{Cmd: "get_maxes"}, "maxes")
	if err != nil {
		return err
	}
	for _, f := range []struct {
		key string
		dst *int
	}{{"keylen_max", &p.keyMax}, {"vallen_max", &p.valMax}} {
		v, ok := m.Get(f.key)
		if !ok {
			return p.protocol("get_maxes", "reply %s lacks %s", m, f.key)
		}
		n, err := atoiField("get_maxes", pmiwire.KV{Key: f.key, Value: v})
		if err != nil {
			return err
		}
		if n < 16 {
			return p.protocol("get_maxes", "%s=%d is too small to use", f.key, n)
		}
		*f.dst = min(n, pmiwire.MaxMessage)
	}
	m, err = p.call(ctx, pmiwire.Msg{Cmd: "get_my_kvsname"}, "my_kvsname")
	if err != nil {
		return err
	}
	name, ok := m.Get("kvsname")
	if !ok || name == "" {
		return p.protocol("get_my_kvsname", "reply %s lacks kvsname", m)
	}
	if len(name) > 256 {
		return p.protocol("get_my_kvsname", "kvsname of %d bytes", len(name))
	}
	p.kvsname = name
	return nil
}

func (p *pmi1) protocol(op, format string, args ...any) error {
	return p.w.fail(fmt.Errorf("%w: pmi1 %s via %s: %s", ErrProtocol, op, p.w.name, fmt.Sprintf(format, args...)))
}

func (p *pmi1) send(ctx context.Context, m pmiwire.Msg) error {
	var err error
	p.buf, err = pmiwire.AppendLine(p.buf[:0], m)
	if err != nil {
		return fmt.Errorf("%w: pmi1 %s: %w", ErrValueTooLong, m.Cmd, err)
	}
	if len(p.buf) > p.lineMax {
		return fmt.Errorf("%w: pmi1 %s request of %d bytes exceeds %d", ErrValueTooLong, m.Cmd, len(p.buf), p.lineMax)
	}
	if err := p.w.write(ctx, p.buf, p.cfg.RequestTimeout); err != nil {
		return fmt.Errorf("pmi1 %s: %w", m.Cmd, err)
	}
	return nil
}

// recv reads one reply and checks its cmd and, if present, its rc.
func (p *pmi1) recv(ctx context.Context, want string, timeout time.Duration) (pmiwire.Msg, error) {
	line, err := p.w.readLine(ctx, timeout)
	if err != nil {
		return pmiwire.Msg{}, fmt.Errorf("pmi1 waiting for %s: %w", want, err)
	}
	m, err := pmiwire.ParseLine(line)
	if err != nil {
		return pmiwire.Msg{}, p.w.fail(fmt.Errorf("%w: pmi1 waiting for %s via %s: %w", ErrProtocol, want, p.w.name, err))
	}
	if m.Cmd != want {
		return m, p.protocol(want, "got %s", m)
	}
	return m, nil
}

// call sends m and waits for the reply named want, failing on rc != 0.
func (p *pmi1) call(ctx context.Context, m pmiwire.Msg, want string) (pmiwire.Msg, error) {
	return p.callTimeout(ctx, m, want, p.cfg.RequestTimeout)
}

func (p *pmi1) callTimeout(ctx context.Context, m pmiwire.Msg, want string, timeout time.Duration) (pmiwire.Msg, error) {
	if err := p.send(ctx, m); err != nil {
		return pmiwire.Msg{}, err
	}
	r, err := p.recv(ctx, want, timeout)
	if err != nil {
		return r, err
	}
	if rc, ok := r.Get("rc"); ok && rc != "0" {
		msg, _ := r.Get("msg")
		return r, fmt.Errorf("%w: pmi1 %s: launcher answered rc=%s %s", ErrProtocol, m.Cmd, rc, msg)
	}
	return r, nil
}

func (p *pmi1) Rank() int { return p.rank }
func (p *pmi1) Size() int { return p.size }
func (p *pmi1) limits() (keyMax, valMax int) {
	// A put line is "cmd=put kvsname=K key=KEY value=VAL\n": keep it within
	// the line bound as well as within vallen_max (minus MPICH's NUL).
	over := len("cmd=put kvsname= key= value=\n") + len(p.kvsname) + p.keyMax
	return p.keyMax - 1, min(p.valMax-1, p.lineMax-over)
}

func (p *pmi1) put(ctx context.Context, key, value string) error {
	_, err := p.call(ctx, pmiwire.Msg{Cmd: "put", Args: []pmiwire.KV{{Key: "kvsname", Value: p.kvsname}, {Key: "key", Value: key}, {Key: "value", Value: value}}}, "put_result")
	return err
}

func (p *pmi1) fence(ctx context.Context) error {
	_, err := p.callTimeout(ctx, pmiwire.Msg{Cmd: "barrier_in"}, "barrier_out", p.cfg.FenceTimeout)
	return err
}

// get returns ok == false when the launcher says the key is absent. Hydra
// answers rc=-1 msg=key_K_not_found, Slurm rc=1 with no message: any
// non-zero rc of a get means "not found".
func (p *pmi1) get(ctx context.Context, key string) (string, bool, error) {
	if err := p.send(ctx, pmiwire.Msg{Cmd: "get", Args: []pmiwire.KV{{Key: "kvsname", Value: p.kvsname}, {Key: "key", Value: key}}}); err != nil {
		return "", false, err
	}
	r, err := p.recv(ctx, "get_result", p.cfg.RequestTimeout)
	if err != nil {
		return "", false, err
	}
	if rc, _ := r.Get("rc"); rc != "0" {
		return "", false, nil
	}
	v, ok := r.Get("value")
	if !ok {
		return "", false, p.protocol("get", "reply %s has rc=0 and no value", r)
	}
	return v, true, nil
}

// processMapping: Hydra and Slurm both keep PMI_process_mapping in the KVS.
func (p *pmi1) processMapping(ctx context.Context) (string, bool, error) {
	return p.get(ctx, "PMI_process_mapping")
}

// abort asks the launcher to kill the job. PMI-1 carries no message; the
// caller prints it.
func (p *pmi1) abort(ctx context.Context, code int, _ string) error {
	// Its own buffer: abort may run while another goroutine is in a call.
	b, err := pmiwire.AppendLine(nil, pmiwire.Msg{Cmd: "abort", Args: []pmiwire.KV{{Key: "exitcode", Value: strconv.Itoa(code)}}})
	if err != nil {
		return err
	}
	return p.w.write(ctx, b, p.cfg.RequestTimeout)
}

func (p *pmi1) finalize(ctx context.Context) error {
	_, err := p.call(ctx, pmiwire.Msg{Cmd: "finalize"}, "finalize_ack")
	return err
}

func (p *pmi1) conn() *wireConn { return p.w }

func atoiField(op string, kv pmiwire.KV) (int, error) {
	n, err := strconv.Atoi(kv.Value)
	if err != nil || n < -1<<30 || n > 1<<30 {
		return 0, fmt.Errorf("%w: %s: %s=%q is not a number", ErrProtocol, op, kv.Key, kv.Value)
	}
	return n, nil
}

func envInt(env func(string) string, name string) (int, error) {
	s := env(name)
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 1<<30 {
		return 0, fmt.Errorf("%w: %s=%q is not a non-negative number", ErrEnv, name, s)
	}
	return n, nil
}
