package amigo

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/amigo-hpc/amigo/bootstrap"
	"github.com/amigo-hpc/amigo/internal/memcopy"
	"github.com/amigo-hpc/amigo/transport"
	"github.com/amigo-hpc/amigo/transport/loop"
)

// Client is one rank's membership in a job: its rank, the size of the job,
// the adapters that reach its peers, its registered memory and its contexts.
type Client struct {
	rank, size int
	cfg        Config
	regions    *transport.Regions
	adapters   []transport.Adapter
	route      []uint8 // adapter index per rank
	contexts   []*Context
	job        bootstrap.Job // the job Open joined, closed by Close
	joined     bool          // made by OpenJob: counted in processRanks
	lost       *lostWatch    // ranks the launcher lost (lost.go), or nil

	// GOMAXPROCS as limitProcs set it, and as it was before; zeros if it
	// did not.
	procsSet, procsWas int
	// monitor is the policy holdMonitor gave the monitor thread,
	// monitorRelease gives back the one it had, monitorErr says why Open
	// did not change it.
	monitor        string
	monitorRelease func()
	monitorErr     error

	mu     sync.Mutex
	closed atomic.Bool
}

// NewLocal starts a job of n ranks inside this process, connected by the
// in-process adapter, and returns their clients in rank order. Each client
// may be handed to its own goroutine.
func NewLocal(n int, cfg Config) ([]*Client, error) {
	eff, err := cfg.resolve(os.LookupEnv)
	if err != nil {
		return nil, err
	}
	engine := loop.EngineInline
	if eff.LoopEngine == "async" {
		engine = loop.EngineAsync
	}
	fab, err := loop.NewFabric(n, loop.Options{RingSlots: eff.RingSlots, RDMASlots: eff.RDMASlots, Engine: engine})
	if err != nil {
		return nil, err
	}
	clients := make([]*Client, n)
	for r := 0; r < n; r++ {
		regions := transport.NewRegions()
		ad, err := fab.Attach(r, regions)
		if err != nil {
			closeAll(clients)
			return nil, err
		}
		c, err := newClient(r, n, eff, regions, []transport.Adapter{ad}, make([]uint8, n))
		if err != nil {
			_ = ad.Close()
			closeAll(clients)
			return nil, err
		}
		clients[r] = c
	}
	return clients, nil
}

func closeAll(cs []*Client) {
	for _, c := range cs {
		if c != nil {
			_ = c.Close()
		}
	}
}

func newClient(rank, size int, cfg Config, regions *transport.Regions, adapters []transport.Adapter, route []uint8) (*Client, error) {
	c := &Client{rank: rank, size: size, cfg: cfg, regions: regions, adapters: adapters, route: route}
	if m, ok := memcopy.ParseMode(cfg.Copy); ok {
		memcopy.SetMode(m)
	}
	for i := 0; i < cfg.Contexts; i++ {
		ctx, err := newContext(c, i)
		if err != nil {
			for _, x := range c.contexts {
				x.shutdown(ErrClosed)
			}
			return nil, err
		}
		c.contexts = append(c.contexts, ctx)
	}
	registerClient(c)
	return c, nil
}

// Rank returns this client's rank.
func (c *Client) Rank() int { return c.rank }

// Size returns the number of ranks in the job.
func (c *Client) Size() int { return c.size }

// Config returns the effective configuration.
func (c *Client) Config() Config { return c.cfg }

// Contexts returns the number of contexts of each rank.
func (c *Client) Contexts() int { return len(c.contexts) }

// Context returns context i of this rank.
func (c *Client) Context(i int) *Context { return c.contexts[i] }

// Adapters returns the names of the adapters the client uses.
func (c *Client) Adapters() []string {
	out := make([]string, len(c.adapters))
	for i, a := range c.adapters {
		out[i] = a.Name()
	}
	return out
}

// Close closes every context, completing their outstanding operations with
// ErrClosed, revokes access to registered memory and closes the adapters.
// Contexts must not be in use by other goroutines.
func (c *Client) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	if c.lost != nil {
		c.lost.stopWatch()
	}
	unregisterClient(c)
	var errs []error
	for _, ctx := range c.contexts {
		if err := ctx.close(); err != nil {
			errs = append(errs, err)
		}
	}
	c.regions.Close()
	for _, a := range c.adapters {
		if err := a.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.closeJob(); err != nil {
		errs = append(errs, err)
	}
	if c.joined {
		c.releaseMonitor()
		c.restoreProcs()
		processRanks.Add(-1)
	}
	return errors.Join(errs...)
}

// MemRegion is memory registered for one-sided access by peers. Peers address
// it by its Key and an offset.
type MemRegion struct {
	c   *Client
	key Key
	mem []byte
}

// Perm is what peers may do to a registered region: PermGet, PermPut,
// PermAtomic, or PermAll.
type Perm = transport.Perm

// Permissions of a registered region.
const (
	PermGet    = transport.PermGet    // Get and Rget read it
	PermPut    = transport.PermPut    // Put and Rput write it
	PermAtomic = transport.PermAtomic // remote atomics operate on its words
	PermAll    = transport.PermAll
)

// RegisterMemory makes mem available to GET, PUT and remote atomics by
// peers that hold the region's key, until Deregister. The caller keeps
// ownership of mem but must expect peers to read and write it while it is
// registered.
func (c *Client) RegisterMemory(mem []byte) (*MemRegion, error) {
	return c.RegisterMemoryPerm(mem, PermAll)
}

// RegisterMemoryPerm is RegisterMemory for the operations perm permits
// only: others are refused by this rank (or by its mirror, over shared
// memory) with ErrPermission, and touch nothing.
func (c *Client) RegisterMemoryPerm(mem []byte, perm Perm) (*MemRegion, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	k, err := c.regions.RegisterPerm(mem, perm)
	if err != nil {
		return nil, err
	}
	return &MemRegion{c: c, key: Key(k), mem: mem}, nil
}

// AllocMemory allocates n bytes in memory the adapters can share with peers
// on the same host, the fastest target for Put and Get, and registers them.
func (c *Client) AllocMemory(n int) (*MemRegion, error) {
	if n <= 0 {
		return nil, fmt.Errorf("amigo: AllocMemory(%d): %w", n, ErrNilBuffer)
	}
	for _, a := range c.adapters {
		if al, ok := a.(transport.Allocator); ok {
			mem, err := al.Alloc(n)
			if err != nil {
				return nil, err
			}
			return c.RegisterMemory(mem)
		}
	}
	return c.RegisterMemory(make([]byte, n))
}

// Key returns the key peers use to address the region.
func (m *MemRegion) Key() Key { return m.key }

// Bytes returns the region's memory.
func (m *MemRegion) Bytes() []byte { return m.mem }

// Len returns the region's length.
func (m *MemRegion) Len() int { return len(m.mem) }

// Deregister revokes peers' access to the region. GETs and PUTs in progress
// on it finish first; later ones fail with ErrBadKey.
func (m *MemRegion) Deregister() error {
	return m.c.regions.Deregister(transport.Key(m.key))
}
