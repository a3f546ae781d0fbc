package bootstrap

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
)

// NewLocal returns the n members of a job whose ranks are goroutines of this
// process, all on node 0. They behave like a launcher's job: puts are
// visible after the next Fence, Fence waits for all n ranks, and a rank that
// aborts or closes makes pending and later fences fail instead of hang.
func NewLocal(n int) []Job {
	return NewLocalOnNodes(make([]int, n))
}

// NewLocalOnNodes is NewLocal with ranks spread over pretend hosts: rank r
// reports Node(r) == nodes[r]. Tests use it to exercise the inter-node
// paths of code that picks transports by Node.
func NewLocalOnNodes(nodes []int) []Job {
	n := len(nodes)
	w := &localWorld{
		n:       n,
		nodes:   append([]int(nil), nodes...),
		secret:  NewSecret(),
		gen:     make(chan struct{}),
		stop:    make(chan struct{}),
		pending: make([]map[string][]byte, n),
		kvs:     make([]map[string][]byte, n),
	}
	jobs := make([]Job, n)
	for r := range n {
		w.pending[r] = map[string][]byte{}
		w.kvs[r] = map[string][]byte{}
		jobs[r] = &localJob{w: w, rank: r}
	}
	return jobs
}

// newSingleton is the job of a process started without a launcher.
func newSingleton(secret []byte) Job {
	j := NewLocal(1)[0].(*localJob)
	if secret != nil {
		j.w.secret = secret
	}
	return j
}

type localWorld struct {
	n      int
	nodes  []int
	secret []byte

	mu      sync.Mutex
	arrived int
	gen     chan struct{}       // closed when the current fence completes
	stop    chan struct{}       // closed on abort or on a rank's close
	stopErr error               // why stop was closed
	aborted error               // set by Abort: every call fails
	pending []map[string][]byte // puts since the last fence, per rank
	kvs     []map[string][]byte // fenced puts, per rank
}

type localJob struct {
	w      *localWorld
	rank   int
	closed bool // under w.mu
}

func (j *localJob) Rank() int      { return j.rank }
func (j *localJob) Size() int      { return j.w.n }
func (j *localJob) Secret() []byte { return j.w.secret }

func (j *localJob) Node(rank int) int {
	if rank < 0 || rank >= j.w.n {
		return -1
	}
	return j.w.nodes[rank]
}

// Protocol names the job's bootstrap: "local", or "singleton" for a job of 1.
func (j *localJob) Protocol() string { return "local" }

func (j *localJob) check() error {
	if j.closed {
		return ErrClosed
	}
	return j.w.aborted
}

func (j *localJob) Put(key string, value []byte) error {
	if err := checkKey(key, false); err != nil {
		return err
	}
	w := j.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := j.check(); err != nil {
		return err
	}
	if _, dup := w.pending[j.rank][key]; dup {
		return fmt.Errorf("bootstrap: put %q: already put by rank %d", key, j.rank)
	}
	if _, dup := w.kvs[j.rank][key]; dup {
		return fmt.Errorf("bootstrap: put %q: already put by rank %d", key, j.rank)
	}
	w.pending[j.rank][key] = bytes.Clone(value)
	return nil
}

func (j *localJob) Fence(ctx context.Context) error {
	w := j.w
	w.mu.Lock()
	if err := j.check(); err != nil {
		w.mu.Unlock()
		return err
	}
	if w.stopErr != nil {
		err := w.stopErr
		w.mu.Unlock()
		return fmt.Errorf("bootstrap: fence: %w", err)
	}
	gen := w.gen
	w.arrived++
	if w.arrived == w.n {
		for r := range w.n {
			for k, v := range w.pending[r] {
				w.kvs[r][k] = v
			}
			w.pending[r] = map[string][]byte{}
		}
		w.arrived = 0
		w.gen = make(chan struct{})
		close(gen)
		w.mu.Unlock()
		return nil
	}
	w.mu.Unlock()
	select {
	case <-gen:
		return nil
	case <-w.stop:
		w.mu.Lock()
		defer w.mu.Unlock()
		return fmt.Errorf("bootstrap: fence: %w", w.stopErr)
	case <-ctx.Done():
		w.mu.Lock()
		defer w.mu.Unlock()
		select {
		case <-gen:
			return nil // completed as we gave up
		default:
		}
		w.arrived--
		return fmt.Errorf("bootstrap: fence: %w", ctx.Err())
	}
}

func (j *localJob) Get(ctx context.Context, rank int, key string) ([]byte, error) {
	if err := checkKey(key, false); err != nil {
		return nil, err
	}
	w := j.w
	if rank < 0 || rank >= w.n {
		return nil, fmt.Errorf("bootstrap: get %q: rank %d out of range [0,%d)", key, rank, w.n)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := j.check(); err != nil {
		return nil, err
	}
	v, ok := w.kvs[rank][key]
	if !ok {
		return nil, fmt.Errorf("%w: %q of rank %d (not put, or not fenced yet)", ErrNotFound, key, rank)
	}
	return bytes.Clone(v), nil
}

// stopLocked ends the world for every rank with err.
func (w *localWorld) stopLocked(err error) {
	if w.stopErr == nil {
		w.stopErr = err
		close(w.stop)
	}
}

func (j *localJob) Abort(code int, msg string) error {
	w := j.w
	if w.n == 1 {
		fmt.Fprintf(os.Stderr, "amigo: aborting (exit code %d): %s\n", code, msg)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.aborted = fmt.Errorf("%w: rank %d aborted the job with code %d: %s", ErrClosed, j.rank, code, msg)
	w.stopLocked(w.aborted)
	j.closed = true
	return nil
}

func (j *localJob) Close() error {
	w := j.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if j.closed {
		return nil
	}
	j.closed = true
	if w.n > 1 {
		// No fence can complete without this rank any more.
		w.stopLocked(fmt.Errorf("%w: rank %d closed its membership", ErrClosed, j.rank))
	}
	return nil
}
