package bootstrap

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/amigo-hpc/amigo/bootstrap/internal/pmiwire"
)

// pmi2 is a client of the PMI-2 wire protocol.
type pmi2 struct {
	w     *wireConn
	cfg   *Config
	rank  int
	size  int
	jobid string
	buf   []byte
}

// PMI-2 has no get_maxes; MPICH and Slurm both use these limits
// (PMI2_MAX_KEYLEN, PMI2_MAX_VALLEN).
const (
	pmi2KeyMax = 64
	pmi2ValMax = 1024
)

// pmi2Init is the version handshake, sent as one write and answered as one
// PMI-1 style line before any framed message may follow.
const pmi2Init = "cmd=init pmi_version=2 pmi_subversion=0\n"

func openPMI2(ctx context.Context, w *wireConn, cfg *Config, env func(string) string) (*pmi2, error) {
	p := &pmi2{w: w, cfg: cfg}
	if err := w.write(ctx, []byte(pmi2Init), cfg.RequestTimeout); err != nil {
		return nil, fmt.Errorf("pmi2 init: %w", err)
	}
	line, err := w.readLine(ctx, cfg.RequestTimeout)
	if err != nil {
		return nil, fmt.Errorf("pmi2 waiting for response_to_init: %w", err)
	}
	m, err := pmiwire.ParseLine(line)
	if err != nil {
		return nil, w.fail(fmt.Errorf("%w: pmi2 init via %s: %w", ErrProtocol, w.name, err))
	}
	if m.Cmd != "response_to_init" {
		return nil, p.protocol("init", "got %s", m)
	}
	if rc, _ := m.Get("rc"); rc != "0" {
		return nil, p.protocol("init", "launcher refused PMI-2: %s", m)
	}
	if v, _ := m.Get("pmi_version"); v != "2" {
		return nil, p.protocol("init", "launcher answered with version %q: %s", v, m)
	}

	// fullinit always carries pmijobid, pmirank and threaded: Slurm
	// requires all three. With PMI_PORT, Hydra identifies us by PMI_ID.
	rankVar := "PMI_RANK"
	if env("PMI_RANK") == "" && env("PMI_ID") != "" {
		rankVar = "PMI_ID"
	}
	r, err := envInt(env, rankVar)
	if err != nil {
		return nil, err
	}
	args := []pmiwire.KV{{Key: "pmijobid", Value: env("PMI_JOBID")}, {Key: "pmirank", Value: strconv.Itoa(r)}, {Key: "threaded", Value: "FALSE"}}
	if id := env("PMI_ID"); id != "" {
		args = append(args, pmiwire.KV{Key: "pmiid", Value: id})
	}
	m, err = p.call(ctx, pmiwire.Msg{Cmd: "fullinit", Args: args}, cfg.RequestTimeout)
	if err != nil {
		return nil, err
	}
	if p.rank, err = p.intField(m, "rank"); err != nil {
		return nil, err
	}
	if p.size, err = p.intField(m, "size"); err != nil {
		return nil, err
	}
	if p.size < 1 || p.size > MaxSize || p.rank < 0 || p.rank >= p.size {
		return nil, p.protocol("fullinit", "rank %d of size %d", p.rank, p.size)
	}
	m, err = p.call(ctx, pmiwire.Msg{Cmd: "job-getid"}, cfg.RequestTimeout)
	if err != nil {
		return nil, err
	}
	if p.jobid, _ = m.Get("jobid"); p.jobid == "" {
		return nil, p.protocol("job-getid", "reply %s has no jobid", m)
	}
	return p, nil
}

func (p *pmi2) intField(m pmiwire.Msg, key string) (int, error) {
	v, ok := m.Get(key)
	if !ok {
		return 0, p.protocol(m.Cmd, "reply %s lacks %s", m, key)
	}
	return atoiField(m.Cmd, pmiwire.KV{Key: key, Value: v})
}

func (p *pmi2) protocol(op, format string, args ...any) error {
	return p.w.fail(fmt.Errorf("%w: pmi2 %s via %s: %s", ErrProtocol, op, p.w.name, fmt.Sprintf(format, args...)))
}

// call sends m as one frame and reads the reply, which must be
// "<cmd>-response" with rc=0. An unknown command gets no reply from Slurm,
// which is why every read is bounded.
func (p *pmi2) call(ctx context.Context, m pmiwire.Msg, timeout time.Duration) (pmiwire.Msg, error) {
	var err error
	p.buf, err = pmiwire.AppendFrame(p.buf[:0], m, pmiwire.Right)
	if err != nil {
		return pmiwire.Msg{}, fmt.Errorf("%w: pmi2 %s: %w", ErrValueTooLong, m.Cmd, err)
	}
	if err := p.w.write(ctx, p.buf, p.cfg.RequestTimeout); err != nil {
		return pmiwire.Msg{}, fmt.Errorf("pmi2 %s: %w", m.Cmd, err)
	}
	body, err := p.w.readFrame(ctx, timeout)
	if err != nil {
		return pmiwire.Msg{}, fmt.Errorf("pmi2 waiting for %s-response: %w", m.Cmd, err)
	}
	r, err := pmiwire.ParseBody(body)
	if err != nil {
		return pmiwire.Msg{}, p.w.fail(fmt.Errorf("%w: pmi2 %s via %s: %w", ErrProtocol, m.Cmd, p.w.name, err))
	}
	if r.Cmd != m.Cmd+"-response" {
		return r, p.protocol(m.Cmd, "got %s", r)
	}
	if rc, ok := r.Get("rc"); !ok || rc != "0" {
		msg, _ := r.Get("errmsg")
		return r, fmt.Errorf("%w: pmi2 %s: launcher answered rc=%q %s", ErrProtocol, m.Cmd, rc, msg)
	}
	return r, nil
}

func (p *pmi2) Rank() int { return p.rank }
func (p *pmi2) Size() int { return p.size }

func (p *pmi2) limits() (keyMax, valMax int) { return pmi2KeyMax - 1, pmi2ValMax - 1 }

func (p *pmi2) put(ctx context.Context, key, value string) error {
	_, err := p.call(ctx, pmiwire.Msg{Cmd: "kvs-put", Args: []pmiwire.KV{{Key: "key", Value: key}, {Key: "value", Value: value}}}, p.cfg.RequestTimeout)
	return err
}

func (p *pmi2) fence(ctx context.Context) error {
	_, err := p.call(ctx, pmiwire.Msg{Cmd: "kvs-fence"}, p.cfg.FenceTimeout)
	return err
}

func (p *pmi2) get(ctx context.Context, key string) (string, bool, error) {
	r, err := p.call(ctx, pmiwire.Msg{Cmd: "kvs-get", Args: []pmiwire.KV{{Key: "jobid", Value: p.jobid}, {Key: "srcid", Value: "-1"}, {Key: "key", Value: key}}}, p.cfg.RequestTimeout)
	if err != nil {
		return "", false, err
	}
	return p.found(r)
}

func (p *pmi2) found(r pmiwire.Msg) (string, bool, error) {
	f, _ := r.Get("found")
	switch strings.ToUpper(f) {
	case "TRUE":
		v, ok := r.Get("value")
		if !ok {
			return "", false, p.protocol(r.Cmd, "reply %s has found=TRUE and no value", r)
		}
		return v, true, nil
	case "FALSE":
		return "", false, nil
	}
	return "", false, p.protocol(r.Cmd, "reply %s has no found=TRUE|FALSE", r)
}

func (p *pmi2) processMapping(ctx context.Context) (string, bool, error) {
	r, err := p.call(ctx, pmiwire.Msg{Cmd: "info-getjobattr", Args: []pmiwire.KV{{Key: "key", Value: "PMI_process_mapping"}}}, p.cfg.RequestTimeout)
	if err != nil {
		return "", false, err
	}
	return p.found(r)
}

// abort gets no reply: the launcher kills the job.
func (p *pmi2) abort(ctx context.Context, code int, msg string) error {
	// Its own buffer: abort may run while another goroutine is in a call.
	b, err := pmiwire.AppendFrame(nil, pmiwire.Msg{Cmd: "abort", Args: []pmiwire.KV{
		{Key: "isworldabort", Value: "TRUE"}, {Key: "msg", Value: sanitizeMsg(fmt.Sprintf("exit code %d: %s", code, msg))}}}, pmiwire.Right)
	if err != nil {
		return err
	}
	return p.w.write(ctx, b, p.cfg.RequestTimeout)
}

func (p *pmi2) finalize(ctx context.Context) error {
	_, err := p.call(ctx, pmiwire.Msg{Cmd: "finalize"}, p.cfg.RequestTimeout)
	return err
}

func (p *pmi2) conn() *wireConn { return p.w }

// sanitizeMsg makes s safe for either wire format and short.
func sanitizeMsg(s string) string {
	if len(s) > 512 {
		s = s[:512]
	}
	return strings.Map(func(r rune) rune {
		switch r {
		case ';', '=', '\n', '\r', 0, '\t':
			return ' '
		}
		return r
	}, s)
}
