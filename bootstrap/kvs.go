package bootstrap

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/amigo-hpc/amigo/bootstrap/internal/pmiwire"
)

// pmiClient is one PMI protocol's client: the operations the launcher's
// KVS offers, with raw string keys and values.
type pmiClient interface {
	Rank() int
	Size() int
	// limits are the longest key and value we may store.
	limits() (keyMax, valMax int)
	put(ctx context.Context, key, value string) error
	fence(ctx context.Context) error
	get(ctx context.Context, key string) (string, bool, error)
	processMapping(ctx context.Context) (string, bool, error)
	abort(ctx context.Context, code int, msg string) error
	finalize(ctx context.Context) error
	conn() *wireConn
}

// Limits of the key scheme (see splitKey).
const (
	maxKeyLen = 40
	maxParts  = 64
)

// Internal keys; user keys may not start with "_amigo".
const (
	keySecret = "_amigo.secret"
	keyHost   = "_amigo.host"
)

// pmiJob implements Job over a pmiClient. A value put under key by rank r is
// stored base64url-encoded in parts of at most valMax characters, under
// "key/r" (the first part, prefixed with the part count and ':') and
// "key/r/1", "key/r/2", ... . The '/' cannot occur in a user key, so names
// never collide.
type pmiJob struct {
	c     pmiClient
	cfg   *Config
	proto string
	sem   chan struct{} // one request at a time

	nodes  []int
	secret []byte
	closed atomic.Bool
	done   atomic.Bool // finalize or abort sent
}

func newPMIJob(c pmiClient, cfg *Config, proto string) *pmiJob {
	return &pmiJob{c: c, cfg: cfg, proto: proto, sem: make(chan struct{}, 1)}
}

func (j *pmiJob) lock(ctx context.Context) error {
	if j.closed.Load() {
		return ErrClosed
	}
	select {
	case j.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	if j.closed.Load() {
		<-j.sem
		return ErrClosed
	}
	return nil
}

func (j *pmiJob) unlock() { <-j.sem }

// setup learns the host layout and the secret, fencing once if either has to
// travel through the KVS. Every rank takes the same branches: they depend
// only on the launcher's answers and environment, which are the same for all.
func (j *pmiJob) setup(ctx context.Context, secret []byte) error {
	size, rank := j.c.Size(), j.c.Rank()
	mapping, ok, err := j.c.processMapping(ctx)
	if err != nil {
		return fmt.Errorf("reading PMI_process_mapping: %w", err)
	}
	needFence := false
	if ok {
		blocks, err := pmiwire.ParseProcessMapping(mapping)
		if err == nil {
			j.nodes, err = pmiwire.Nodes(blocks, size)
		}
		if err != nil {
			return fmt.Errorf("%w: PMI_process_mapping: %w", ErrProtocol, err)
		}
	} else {
		if err := j.put(keyHost, []byte(hostIdentity()), true); err != nil {
			return err
		}
		needFence = true
	}
	shared := secret == nil // the secret travels through the KVS
	if shared && rank == 0 {
		secret = NewSecret()
		if err := j.put(keySecret, secret, true); err != nil {
			return err
		}
	}
	if shared || needFence {
		if err := j.Fence(ctx); err != nil {
			return err
		}
	}
	if shared && rank != 0 {
		if secret, err = j.get(ctx, 0, keySecret, true); err != nil {
			return fmt.Errorf("reading the job secret from rank 0: %w", err)
		}
		if len(secret) < 16 {
			return fmt.Errorf("%w: job secret from rank 0 has %d bytes", ErrProtocol, len(secret))
		}
	}
	j.secret = secret
	if j.nodes == nil {
		ids := map[string]int{}
		j.nodes = make([]int, size)
		for r := range size {
			h, err := j.get(ctx, r, keyHost, true)
			if err != nil {
				return fmt.Errorf("reading the host of rank %d: %w", r, err)
			}
			id, seen := ids[string(h)]
			if !seen {
				id = len(ids)
				ids[string(h)] = id
			}
			j.nodes[r] = id
		}
	}
	return nil
}

func (j *pmiJob) Rank() int        { return j.c.Rank() }
func (j *pmiJob) Size() int        { return j.c.Size() }
func (j *pmiJob) Secret() []byte   { return j.secret }
func (j *pmiJob) Protocol() string { return j.proto }

func (j *pmiJob) Node(rank int) int {
	if rank < 0 || rank >= len(j.nodes) {
		return -1
	}
	return j.nodes[rank]
}

// checkKey validates a user key (internal keys pass with internal=true).
func checkKey(key string, internal bool) error {
	if key == "" || len(key) > maxKeyLen {
		return fmt.Errorf("%w: key %q must be 1 to %d characters", ErrValueTooLong, key, maxKeyLen)
	}
	if !internal && strings.HasPrefix(key, "_amigo") {
		return fmt.Errorf("bootstrap: key %q: the prefix _amigo is reserved", key)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return fmt.Errorf("bootstrap: key %q: only A-Z a-z 0-9 _ . - are allowed", key)
		}
	}
	return nil
}

func partKey(key string, rank, part int) string {
	k := key + "/" + strconv.Itoa(rank)
	if part > 0 {
		k += "/" + strconv.Itoa(part)
	}
	return k
}

// split encodes value into the parts stored for it.
func split(key string, rank int, value []byte, keyMax, valMax int) (keys, vals []string, err error) {
	enc := string(pmiwire.AppendValue(nil, value))
	const hdr = len("64:")
	chunk := valMax - hdr
	n := max(1, (len(enc)+chunk-1)/chunk)
	if chunk < 8 || n > maxParts {
		return nil, nil, fmt.Errorf("%w: value for key %q is %d bytes; this launcher holds at most %d (%d parts of %d characters)",
			ErrValueTooLong, key, len(value), pmiwire.DecodedMax(maxParts*max(chunk, 0)), maxParts, valMax)
	}
	if k := partKey(key, rank, n-1); len(k) > keyMax {
		return nil, nil, fmt.Errorf("%w: stored key %q is longer than the launcher's %d", ErrValueTooLong, k, keyMax)
	}
	for i := range n {
		part := enc[i*chunk : min(len(enc), (i+1)*chunk)]
		if i == 0 {
			part = strconv.Itoa(n) + ":" + part
		}
		keys = append(keys, partKey(key, rank, i))
		vals = append(vals, part)
	}
	return keys, vals, nil
}

func (j *pmiJob) Put(key string, value []byte) error { return j.put(key, value, false) }

func (j *pmiJob) put(key string, value []byte, internal bool) error {
	if err := checkKey(key, internal); err != nil {
		return err
	}
	keyMax, valMax := j.c.limits()
	keys, vals, err := split(key, j.c.Rank(), value, keyMax, valMax)
	if err != nil {
		return err
	}
	ctx := context.Background()
	if err := j.lock(ctx); err != nil {
		return err
	}
	defer j.unlock()
	for i := range keys {
		if err := j.c.put(ctx, keys[i], vals[i]); err != nil {
			return fmt.Errorf("bootstrap: put %q: %w", key, err)
		}
	}
	return nil
}

func (j *pmiJob) Fence(ctx context.Context) error {
	if err := j.lock(ctx); err != nil {
		return err
	}
	defer j.unlock()
	if err := j.c.fence(ctx); err != nil {
		return fmt.Errorf("bootstrap: fence: %w", err)
	}
	return nil
}

func (j *pmiJob) Get(ctx context.Context, rank int, key string) ([]byte, error) {
	return j.get(ctx, rank, key, false)
}

func (j *pmiJob) get(ctx context.Context, rank int, key string, internal bool) ([]byte, error) {
	if err := checkKey(key, internal); err != nil {
		return nil, err
	}
	if rank < 0 || rank >= j.c.Size() {
		return nil, fmt.Errorf("bootstrap: get %q: rank %d out of range [0,%d)", key, rank, j.c.Size())
	}
	if err := j.lock(ctx); err != nil {
		return nil, err
	}
	defer j.unlock()
	first, ok, err := j.c.get(ctx, partKey(key, rank, 0))
	if err != nil {
		return nil, fmt.Errorf("bootstrap: get %q of rank %d: %w", key, rank, err)
	}
	if !ok {
		return nil, fmt.Errorf("%w: %q of rank %d (not put, or not fenced yet)", ErrNotFound, key, rank)
	}
	colon := strings.IndexByte(first, ':')
	n, err := strconv.Atoi(first[:max(colon, 0)])
	if colon < 0 || err != nil || n < 1 || n > maxParts {
		return nil, fmt.Errorf("%w: value of %q of rank %d has no part count", ErrProtocol, key, rank)
	}
	var enc strings.Builder
	enc.WriteString(first[colon+1:])
	for i := 1; i < n; i++ {
		v, ok, err := j.c.get(ctx, partKey(key, rank, i))
		if err != nil {
			return nil, fmt.Errorf("bootstrap: get %q of rank %d, part %d: %w", key, rank, i, err)
		}
		if !ok {
			return nil, fmt.Errorf("%w: %q of rank %d: part %d of %d is missing", ErrProtocol, key, rank, i, n)
		}
		enc.WriteString(v)
	}
	b, err := pmiwire.DecodeValue(enc.String())
	if err != nil {
		return nil, fmt.Errorf("%w: %q of rank %d: %w", ErrProtocol, key, rank, err)
	}
	return b, nil
}

func (j *pmiJob) Abort(code int, msg string) error {
	if j.proto == "pmi1" {
		// PMI-1's abort carries only the exit code.
		fmt.Fprintf(os.Stderr, "amigo: rank %d aborting the job (exit code %d): %s\n", j.c.Rank(), code, msg)
	}
	j.done.Store(true)
	err := j.c.abort(context.Background(), code, msg)
	j.closed.Store(true)
	if err != nil {
		return fmt.Errorf("bootstrap: abort: %w", err)
	}
	return nil
}

func (j *pmiJob) Close() error {
	if j.closed.Swap(true) {
		return nil
	}
	// Interrupt a call in progress on another goroutine, then finalize.
	interrupted := false
	select {
	case j.sem <- struct{}{}:
	default:
		interrupted = true
		j.c.conn().close()
		j.sem <- struct{}{}
	}
	defer func() { <-j.sem }()
	var err error
	if !j.done.Swap(true) && !interrupted {
		err = j.c.finalize(context.Background())
	}
	j.c.conn().close()
	if err != nil {
		return fmt.Errorf("bootstrap: finalize: %w", err)
	}
	return nil
}
