//go:build ofi

package ofi

/*
#include "amigo_ofi.h"
*/
import "C"

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/amigo-hpc/amigo/internal/ring"
	"github.com/amigo-hpc/amigo/transport"
)

// The optional interfaces of the transport contract this adapter implements.
var (
	_ transport.Starter          = (*Adapter)(nil)
	_ transport.DoorbellProvider = (*Adapter)(nil)
	_ transport.Oversubscriber   = (*Adapter)(nil)
	_ transport.HostMapper       = (*Adapter)(nil)
)

// KVSKey is the key under which each rank publishes its endpoints' names
// through the job's bootstrap.
const KVSKey = "amigo.ofi"

// getinfo returns the first fi_info of provider prov that meets amigo's
// requirements (amigo_hints), checked once more here: a provider that
// does not keep sends in order or does not manage its resources is refused
// with the reason. A node other than "" is the local address the
// endpoints bind to (FI_SOURCE).
//
// It asks first for multi-receive buffers (FI_MULTI_RECV) unless single
// is set, and without them if the provider has none.
func getinfo(prov, node string, single bool) (*C.struct_fi_info, error) {
	if !single {
		if info, err := getinfoWith(prov, node, 1); err == nil {
			return info, nil
		}
	}
	return getinfoWith(prov, node, 0)
}

func getinfoWith(prov, node string, multi C.int) (*C.struct_fi_info, error) {
	cp := C.CString(prov)
	defer C.free(unsafe.Pointer(cp))
	var cn *C.char
	if node != "" {
		cn = C.CString(node)
		defer C.free(unsafe.Pointer(cn))
	}
	var info *C.struct_fi_info
	if rc := C.amigo_getinfo(cp, cn, multi, &info); rc != 0 {
		return nil, fmt.Errorf("%w: %q: %v", ErrProvider, prov, fiErr("fi_getinfo", C.ssize_t(rc)))
	}
	for i := info; i != nil; i = C.amigo_next(i) {
		if C.GoString(C.amigo_prov(i)) != prov {
			continue
		}
		if uint64(C.amigo_tx_order(i))&C.FI_ORDER_SAS == 0 {
			continue
		}
		if uint64(C.amigo_mode(i))&^uint64(C.FI_CONTEXT|C.FI_CONTEXT2) != 0 {
			continue
		}
		if uint64(C.amigo_mr_mode(i))&^uint64(mrModes) != 0 {
			continue
		}
		dup := C.fi_dupinfo(i)
		C.fi_freeinfo(info)
		if dup == nil {
			return nil, errors.New("ofi: fi_dupinfo failed")
		}
		return dup, nil
	}
	C.fi_freeinfo(info)
	return nil, fmt.Errorf("%w: %q has no reliable-datagram endpoint with ordered sends (FI_ORDER_SAS), RMA and managed resources", ErrProvider, prov)
}

// mrModes are the memory-registration modes the adapter honours.
const mrModes = C.FI_MR_LOCAL | C.FI_MR_VIRT_ADDR | C.FI_MR_ALLOCATED | C.FI_MR_PROV_KEY | C.FI_MR_ENDPOINT

// Adapter is the libfabric adapter of one rank.
type Adapter struct {
	opts Options
	job  transport.Bootstrap
	// hostCPUs is the number of processors the ranks of this host may run
	// on together, stored by Start; 0 if unknown.
	hostCPUs atomic.Int32
	// procsHeld says that Start raised GOMAXPROCS (procs.go) and Close
	// must release it; under mu.
	procsHeld bool
	regions   *transport.Regions
	rank      int
	size      int
	local     int

	info       *C.struct_fi_info
	fab        *C.struct_fid_fabric
	dom        *C.struct_fid_domain
	av         *C.struct_fid_av
	prov       string
	injectSize int
	mrMode     uint64
	eps        []*endpoint // by context, made by New
	maxPacket  int         // largest packet payload: half a link's ring
	multi      bool        // receive buffers are multi-receive (FI_MULTI_RECV)

	mu    sync.Mutex
	peers [][][]byte      // endpoint names by rank and context, after Start
	addrs [][]C.fi_addr_t // inserted addresses by rank (nil: not yet)
	ports []*port
	regs  map[transport.Key]*targetRegion
	spare []*targetRegion // closed records, for the next regions
	// regOut receives what fi_mr_reg made of a region (resolve, under
	// mu): a variable whose address goes to C would be allocated on each
	// registration.
	regOut struct {
		mr   *C.struct_fid_mr
		key  C.uint64_t
		desc C.uintptr_t
	}
	nextKey atomic.Uint64 // keys requested of the provider
	bells   map[int]*sleepBell
	stop    chan struct{}
	wg      sync.WaitGroup
	closed  atomic.Bool

	// The watcher's pace (watch): slow is set while it ticks slower than
	// watchTick because every context polled; kick brings it back to
	// watchTick (a context about to sleep on another adapter's doorbell).
	slow  atomic.Bool
	kick  chan struct{}
	pace  atomic.Int64  // the watcher's tick, as set at its last tick (ns)
	kicks atomic.Uint64 // kicks sent
	ticks atomic.Uint64 // the watcher's ticks, twice: odd while one runs
}

// endpoint is one context's reliable-datagram endpoint and its completion
// queues: transmissions (sends and RMA) and receptions apart, so that Poll
// reads only what it delivers and Progress only what it issued.
type endpoint struct {
	ep         *C.struct_fid_ep
	txcq, rxcq *C.struct_fid_cq
	txfd, rxfd int // the queues' wait objects, -1 without
	name       []byte
	// eph, txh and rxh are ep, txcq and rxcq as numbers, for the calls
	// of the message path (amigo_ofi.c).
	eph, txh, rxh C.uintptr_t
}

// fitEager returns the ring size to use over provider prov: slots, or
// less over ofi_rxm, so that the largest packet (half the ring) and its
// header fit rxm's eager limit (FI_OFI_RXM_EAGER_LIMIT, 16 KiB by
// default). Larger messages rxm cuts into segments (its SAR protocol),
// which loses messages between two processes over tcp;ofi_rxm (libfabric
// 1.17 to 1.18); the AMI moves large data by RDMA anyway. Every rank
// computes the same from the same environment.
func fitEager(prov string, slots int) int {
	if !strings.Contains(prov, "ofi_rxm") {
		return slots
	}
	eager := 16384
	if v, err := strconv.Atoi(os.Getenv("FI_OFI_RXM_EAGER_LIMIT")); err == nil && v > 0 {
		eager = v
	}
	for slots > 16 && hdrSize+ring.MaxPayload(slots) > eager {
		slots /= 2
	}
	return slots
}

// RingSlots returns the number of slots of each link's descriptor buffer:
// Options.RingSlots, or fewer over ofi_rxm (fitEager). A packet the AMI
// writes takes at most half of them.
func (a *Adapter) RingSlots() int { return a.opts.RingSlots }

// ipProviders are the core providers that address endpoints by IP: their
// endpoints bind to the address through which the job's hosts reach each
// other (Options.Addr).
var ipProviders = []string{"tcp", "sockets", "udp", "verbs", "net"}

// sourceInfo is getinfo for opts.Provider bound to opts.Addr; without it,
// a provider that addresses by IP binds to the local address of the route
// to the launcher (transport.LauncherRouteIP) where there is one and the
// provider takes it, and otherwise wherever the provider chooses.
func sourceInfo(opts Options) (*C.struct_fi_info, error) {
	if opts.Addr != "" {
		info, err := getinfo(opts.Provider, opts.Addr, opts.SingleRecv)
		if err != nil {
			return nil, fmt.Errorf("ofi: address %s: %w", opts.Addr, err)
		}
		return info, nil
	}
	core, _, _ := strings.Cut(opts.Provider, ";")
	if slices.Contains(ipProviders, core) {
		if ip := transport.LauncherRouteIP(); ip != "" {
			if info, err := getinfo(opts.Provider, ip, opts.SingleRecv); err == nil {
				return info, nil
			}
		}
	}
	if core == "shm" {
		sweepShm(shmDir)
		if info, err := getinfo(opts.Provider, shmName(), opts.SingleRecv); err == nil {
			return info, nil
		}
	}
	return getinfo(opts.Provider, "", opts.SingleRecv)
}

// shmName is the name under which the shm provider makes the shared
// memory of this adapter's endpoints (files /dev/shm/NAME:...): the
// process's pid namespace, its process id and a random number. The
// provider's own choice is the process id alone, and the file of a
// process that was killed stays behind: a later process given the same id
// could then open no endpoint (fi_endpoint: EBUSY). The namespace lets a
// later process tell the files of a dead process of its own namespace
// (sweepShm) from those of a live process it cannot see.
func shmName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s%d-%x", shmPrefix(), os.Getpid(), b)
}

// shmPrefix is the start of the names of this pid namespace's shm
// endpoints: "amigo-" and the namespace's inode number.
var shmPrefix = sync.OnceValue(func() string {
	ns := "0"
	if l, err := os.Readlink("/proc/self/ns/pid"); err == nil {
		// pid:[4026531836]
		if i, j := strings.IndexByte(l, '['), strings.IndexByte(l, ']'); i >= 0 && j > i {
			ns = l[i+1 : j]
		}
	}
	return "amigo-" + ns + "-"
})

// shmDir is where the shm provider's files are.
var shmDir = "/dev/shm"

// sweepShm removes what killed processes left in dir: the files of shm
// endpoints named by shmName whose process is gone. Only names of this
// pid namespace are looked at (a process of another is not seen alive
// from here), and only files of this user. It returns how many it
// removed. A process that exits normally removes its own: the shm
// provider unlinks a region when its endpoint closes.
func sweepShm(dir string) int {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	prefix, uid, gone := shmPrefix(), os.Getuid(), 0
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok {
			continue
		}
		pidStr, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid <= 0 {
			continue
		}
		if err := unix.Kill(pid, 0); err == nil || !errors.Is(err, unix.ESRCH) {
			continue // alive (or not ours to signal: alive)
		}
		path := filepath.Join(dir, e.Name())
		var st unix.Stat_t
		if unix.Lstat(path, &st) != nil || int(st.Uid) != uid || st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		if os.Remove(path) == nil {
			gone++
		}
	}
	return gone
}

// New opens provider opts.Provider for the rank job describes, makes one
// endpoint per context and publishes their names with job.Put. Peers
// become reachable once every rank published and Start ran (after the
// job's fence).
func New(job transport.Bootstrap, regions *transport.Regions, opts Options) (*Adapter, error) {
	opts, err := opts.Validate()
	if err != nil {
		return nil, err
	}
	opts.RingSlots = fitEager(opts.Provider, opts.RingSlots)
	info, err := sourceInfo(opts)
	if err != nil {
		return nil, err
	}
	a := &Adapter{
		opts:       opts,
		job:        job,
		regions:    regions,
		rank:       job.Rank(),
		size:       job.Size(),
		info:       info,
		prov:       opts.Provider,
		injectSize: min(int(C.amigo_inject_size(info)), 4096),
		mrMode:     uint64(C.amigo_mr_mode(info)),
		maxPacket:  ring.MaxPayload(opts.RingSlots),
		multi:      !opts.SingleRecv && uint64(C.amigo_caps(info))&C.FI_MULTI_RECV != 0,
		regs:       make(map[transport.Key]*targetRegion),
		bells:      make(map[int]*sleepBell),
		stop:       make(chan struct{}),
		kick:       make(chan struct{}, 1),
	}
	for r := 0; r < a.size; r++ {
		if job.Node(r) == job.Node(a.rank) {
			a.local++
		}
	}
	if opts.RegisterLocal {
		a.mrMode |= C.FI_MR_LOCAL
	}
	if rc := C.amigo_open(info, &a.fab, &a.dom, &a.av); rc != 0 {
		C.fi_freeinfo(info)
		return nil, fmt.Errorf("ofi: %s: %v", a.prov, fiErr("open", C.ssize_t(rc)))
	}
	for c := 0; c < opts.Contexts; c++ {
		e, err := a.openEndpoint()
		if err != nil {
			a.release()
			return nil, fmt.Errorf("ofi: %s: endpoint of context %d: %w", a.prov, c, err)
		}
		a.eps = append(a.eps, e)
	}
	if err := job.Put(KVSKey, a.card()); err != nil {
		a.release()
		return nil, fmt.Errorf("ofi: publish address: %w", err)
	}
	if err := transport.PublishAffinity(job, transport.CPUsKey("ofi")); err != nil {
		a.release()
		return nil, fmt.Errorf("ofi: publish processors: %w", err)
	}
	regions.AddMirror(a)
	inProcess.join()
	a.wg.Add(1)
	go a.watch()
	return a, nil
}

// inProcess holds the endpoints of the adapters of this process that
// closed while another one is still open. A provider reaches an endpoint
// of its own process through that endpoint's memory (shm maps a peer in
// the same process by the pointer its endpoint holds, not by a mapping
// of its own), so closing the endpoint would leave a peer that has not
// yet heard the goodbye writing into memory given back: the process
// crashes on the peer's next send. The last adapter to close releases
// them all. A process with one adapter, as a rank is, releases at once.
var inProcess heldEndpoints

type heldEndpoints struct {
	mu      sync.Mutex
	open    int      // adapters made and not yet closed
	retired []func() // releases of those that closed, held back
}

// join counts a new adapter open.
func (h *heldEndpoints) join() {
	h.mu.Lock()
	h.open++
	h.mu.Unlock()
}

// retire runs release, the release of a closing adapter's endpoints,
// with those held back before it, once no other adapter of the process
// is open; until then it holds it back.
func (h *heldEndpoints) retire(release func()) {
	h.mu.Lock()
	h.open--
	h.retired = append(h.retired, release)
	if h.open > 0 {
		h.mu.Unlock()
		return
	}
	run := h.retired
	h.retired = nil
	h.mu.Unlock()
	for _, f := range run {
		f()
	}
}

func (a *Adapter) openEndpoint() (*endpoint, error) {
	e := &endpoint{txfd: -1, rxfd: -1}
	var fd C.int
	if rc := C.amigo_cq_open(a.dom, C.size_t(max(int(C.amigo_tx_size(a.info)), 1024)), 1, &e.txcq, &fd); rc != 0 {
		return nil, fiErr("fi_cq_open", C.ssize_t(rc))
	}
	e.txfd = int(fd)
	if rc := C.amigo_cq_open(a.dom, C.size_t(max(int(C.amigo_rx_size(a.info)), 1024)), 1, &e.rxcq, &fd); rc != 0 {
		C.amigo_close(C.amigo_fid_cq(e.txcq))
		return nil, fiErr("fi_cq_open", C.ssize_t(rc))
	}
	e.rxfd = int(fd)
	var minMulti C.size_t
	if a.multi {
		// A multi-receive buffer is given back once the largest message
		// no longer fits.
		minMulti = C.size_t(hdrSize + a.maxPacket)
	}
	if rc := C.amigo_ep_open(a.dom, a.info, a.av, e.txcq, e.rxcq, minMulti, &e.ep); rc != 0 {
		C.amigo_close(C.amigo_fid_cq(e.txcq))
		C.amigo_close(C.amigo_fid_cq(e.rxcq))
		return nil, fiErr("fi_endpoint", C.ssize_t(rc))
	}
	var buf [256]byte
	n := C.size_t(len(buf))
	if rc := C.amigo_getname(e.ep, unsafe.Pointer(&buf[0]), &n); rc != 0 {
		e.close()
		return nil, fiErr("fi_getname", C.ssize_t(rc))
	}
	e.name = append([]byte(nil), buf[:n]...)
	e.eph = C.uintptr_t(uintptr(unsafe.Pointer(e.ep)))
	e.txh = C.uintptr_t(uintptr(unsafe.Pointer(e.txcq)))
	e.rxh = C.uintptr_t(uintptr(unsafe.Pointer(e.rxcq)))
	return e, nil
}

// close closes the endpoint, then its queues; a second call does nothing.
func (e *endpoint) close() {
	if e.ep == nil {
		return
	}
	C.amigo_close(C.amigo_fid_ep(e.ep))
	C.amigo_close(C.amigo_fid_cq(e.txcq))
	C.amigo_close(C.amigo_fid_cq(e.rxcq))
	e.ep = nil
}

// card is what a rank publishes: its provider, its ring size and the name
// of each context's endpoint.
//
//	u8 len, provider | u32 ring slots | u16 contexts | per context: u16 len, name
func (a *Adapter) card() []byte {
	b := append([]byte{byte(len(a.prov))}, a.prov...)
	b = binary.LittleEndian.AppendUint32(b, uint32(a.opts.RingSlots))
	b = binary.LittleEndian.AppendUint16(b, uint16(len(a.eps)))
	for _, e := range a.eps {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(e.name)))
		b = append(b, e.name...)
	}
	return b
}

// parseCard decodes a peer's card, refusing one of another provider or
// ring size.
// nameRoom bounds an endpoint's name (fi_getname) in a card, with room
// for a terminating zero: the longest of the providers' address formats
// (a string of shm, an InfiniBand or a Slingshot address) is a few
// hundred bytes.
const nameRoom = 1024

func (a *Adapter) parseCard(b []byte) ([][]byte, error) {
	bad := errors.New("malformed")
	if len(b) < 1 || len(b) < 1+int(b[0])+6 {
		return nil, bad
	}
	prov := string(b[1 : 1+b[0]])
	b = b[1+b[0]:]
	if prov != a.prov {
		return nil, fmt.Errorf("provider %q, this rank %q", prov, a.prov)
	}
	if slots := int(binary.LittleEndian.Uint32(b)); slots != a.opts.RingSlots {
		return nil, fmt.Errorf("ring of %d slots, this rank %d", slots, a.opts.RingSlots)
	}
	n := int(binary.LittleEndian.Uint16(b[4:]))
	b = b[6:]
	names := make([][]byte, 0, n)
	for i := 0; i < n; i++ {
		if len(b) < 2 || len(b) < 2+int(binary.LittleEndian.Uint16(b)) {
			return nil, bad
		}
		l := int(binary.LittleEndian.Uint16(b))
		if l == 0 || l > nameRoom-1 {
			return nil, fmt.Errorf("endpoint name of %d bytes", l)
		}
		names = append(names, append([]byte(nil), b[2:2+l]...))
		b = b[2+l:]
	}
	return names, nil
}

// Start learns every peer's endpoint names. It runs after the fence that
// follows New on every rank. Addresses enter the address vector on first
// use of a peer.
func (a *Adapter) Start(ctx context.Context) error {
	a.hostCPUs.Store(int32(transport.HostProcessors(ctx, a.job, transport.CPUsKey("ofi"))))
	peers := make([][][]byte, a.size)
	for r := 0; r < a.size; r++ {
		if r == a.rank {
			continue
		}
		v, err := a.job.Get(ctx, r, KVSKey)
		if err != nil {
			return fmt.Errorf("ofi: address of rank %d: %w", r, err)
		}
		if peers[r], err = a.parseCard(v); err != nil {
			return fmt.Errorf("ofi: rank %d published %d bytes: %v", r, len(v), err)
		}
	}
	a.mu.Lock()
	a.peers = peers
	a.addrs = make([][]C.fi_addr_t, a.size)
	if !a.procsHeld && !a.closed.Load() && !a.Oversubscribed() {
		a.procsHeld = raiseProcs()
	}
	a.mu.Unlock()
	return nil
}

// Name returns "ofi".
func (a *Adapter) Name() string { return "ofi" }

// Provider returns the name of the provider the adapter uses.
func (a *Adapter) Provider() string { return a.prov }

// Reaches reports whether rank published its endpoints.
func (a *Adapter) Reaches(rank int) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return rank != a.rank && rank >= 0 && rank < len(a.peers) && len(a.peers[rank]) > 0
}

// fiAddr returns the address-vector entry of context ctx of rank,
// inserting the rank's endpoints on first use.
func (a *Adapter) fiAddr(to transport.Addr) (C.fi_addr_t, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, c := int(to.Rank), int(to.Context)
	if r < 0 || r >= len(a.peers) || c < 0 || c >= len(a.peers[r]) {
		return 0, &transport.PeerError{Addr: to, Err: transport.ErrUnreachable}
	}
	if a.addrs[r] == nil {
		addrs := make([]C.fi_addr_t, len(a.peers[r]))
		for i, name := range a.peers[r] {
			// The provider reads as many bytes as its address format
			// says (a sockaddr by its family, a string up to its NUL),
			// not as many as the peer published: it reads a copy
			// padded with zeros.
			var buf [nameRoom]byte
			copy(buf[:], name)
			if rc := C.amigo_av_insert(a.av, unsafe.Pointer(&buf[0]), &addrs[i]); rc != 0 {
				return 0, &transport.PeerError{Addr: to, Err: fmt.Errorf("%w: %v", transport.ErrUnreachable, fiErr("fi_av_insert", C.ssize_t(rc)))}
			}
		}
		a.addrs[r] = addrs
	}
	return a.addrs[r][c], nil
}

// Open opens the port of local context ctx.
func (a *Adapter) Open(ctx int, bell *transport.Doorbell) (transport.Port, error) {
	if ctx < 0 || ctx >= len(a.eps) {
		return nil, fmt.Errorf("ofi: context %d: the adapter has endpoints for %d (Options.Contexts)", ctx, len(a.eps))
	}
	if bell == nil {
		return nil, errors.New("ofi: nil doorbell")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed.Load() {
		return nil, transport.ErrClosed
	}
	for len(a.ports) <= ctx {
		a.ports = append(a.ports, nil)
	}
	if a.ports[ctx] != nil {
		return nil, fmt.Errorf("ofi: rank %d context %d opened twice", a.rank, ctx)
	}
	p, err := newPort(a, ctx, bell)
	if err != nil {
		return nil, err
	}
	a.ports[ctx] = p
	if sb := a.bells[ctx]; sb != nil && sb.bell == bell {
		sb.w.p.Store(p)
		p.ownBell = true
	}
	return p, nil
}

// Close closes every port and releases the provider's objects.
func (a *Adapter) Close() error {
	if a.closed.Swap(true) {
		return nil
	}
	a.regions.RemoveMirror(a)
	close(a.stop)
	a.wg.Wait()
	a.mu.Lock()
	ports := append([]*port(nil), a.ports...)
	a.mu.Unlock()
	for _, p := range ports {
		if p != nil {
			p.Close()
		}
	}
	a.mu.Lock()
	for k, r := range a.regs {
		r.close()
		delete(a.regs, k)
	}
	for _, sb := range a.bells {
		sb.w.close()
	}
	a.mu.Unlock()
	inProcess.retire(func() {
		for _, p := range ports {
			if p != nil {
				p.release()
			}
		}
		a.release()
	})
	a.mu.Lock()
	held := a.procsHeld
	a.procsHeld = false
	a.mu.Unlock()
	if held {
		releaseProcs()
	}
	if os.Getenv("AMIGO_OFI_STATS") != "" {
		a.opts.Logf("rank %d: closed", a.rank)
	}
	return nil
}

// release closes the endpoints, the address vector, the domain and the
// fabric.
func (a *Adapter) release() {
	for _, e := range a.eps {
		e.close()
	}
	a.eps = nil
	C.amigo_close(C.amigo_fid_av(a.av))
	C.amigo_close(C.amigo_fid_domain(a.dom))
	C.amigo_close(C.amigo_fid_fabric(a.fab))
	C.fi_freeinfo(a.info)
}

// Oversubscribed reports whether more ranks of the job run on this host than
// they have processors: the union of their affinity masks once Start learnt
// them (transport.HostProcessors), else this process's own.
func (a *Adapter) Oversubscribed() bool {
	n := int(a.hostCPUs.Load())
	if n == 0 {
		n = transport.Processors()
	}
	return a.local > n
}

// SameHost reports whether rank runs on this rank's host.
func (a *Adapter) SameHost(rank int) bool {
	return rank >= 0 && rank < a.size && a.job.Node(rank) == a.job.Node(a.rank)
}

// targetRegion is a region of this rank as the provider knows it:
// registered with fi_mr_reg on first request of a peer (each endpoint its
// own registration where the provider binds them to endpoints), the Go
// memory under it pinned meanwhile.
type targetRegion struct {
	mem    []byte
	perm   transport.Perm
	pin    runtime.Pinner
	pinned bool
	mrs    []*C.struct_fid_mr // by context; one shared at index 0 without FI_MR_ENDPOINT
	keys   []uint64
}

func (r *targetRegion) close() {
	for i, mr := range r.mrs {
		if mr != nil {
			C.amigo_close(C.amigo_fid_mr(mr))
			r.mrs[i] = nil
		}
	}
	if r.pinned {
		r.pin.Unpin()
		r.pinned = false
	}
	r.mem = nil
}

// maxSpare bounds the closed region records the adapter keeps for reuse:
// a program that sends large messages one after the other registers and
// deregisters a region for each, and its records, tables and pins then
// allocate nothing.
const maxSpare = 64

// Registered records a region for peers to ask about (transport.Mirror).
func (a *Adapter) Registered(index int, key transport.Key, mem []byte, perm transport.Perm) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed.Load() {
		return
	}
	var r *targetRegion
	if n := len(a.spare); n > 0 {
		r = a.spare[n-1]
		a.spare = a.spare[:n-1]
	} else {
		r = new(targetRegion)
	}
	r.mem, r.perm = mem, perm
	a.regs[key] = r
}

// Deregistered closes the region's registrations with the provider, after
// which no peer reaches it, and unpins it (transport.Mirror).
func (a *Adapter) Deregistered(index int, key transport.Key) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r := a.regs[key]; r != nil {
		r.close()
		delete(a.regs, key)
		if len(a.spare) < maxSpare {
			a.spare = append(a.spare, r)
		}
	}
}

// resolve returns what a peer needs to reach the region of key through
// context ctx's endpoint, registering it with the provider on first
// request.
func (a *Adapter) resolve(key transport.Key, ctx int) (base, length, mrkey uint64, perm transport.Perm, status uint8) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.regs[key]
	if r == nil || a.closed.Load() {
		return 0, 0, 0, 0, stBadKey
	}
	slot := 0
	if a.mrMode&C.FI_MR_ENDPOINT != 0 {
		slot = ctx
	}
	if !r.pinned {
		n := 1
		if a.mrMode&C.FI_MR_ENDPOINT != 0 {
			n = len(a.eps)
		}
		if len(r.mrs) != n {
			r.mrs = make([]*C.struct_fid_mr, n)
			r.keys = make([]uint64, n)
		}
		r.pin.Pin(unsafe.Pointer(unsafe.SliceData(r.mem)))
		r.pinned = true
	}
	if r.mrs[slot] == nil {
		access := uint64(0)
		if r.perm&transport.PermGet != 0 {
			access |= C.FI_REMOTE_READ
		}
		if r.perm&transport.PermPut != 0 {
			access |= C.FI_REMOTE_WRITE
		}
		if access == 0 {
			access = C.FI_REMOTE_READ // atomics only: the owner performs them
		}
		out := &a.regOut
		rc := C.amigo_mr_reg(a.dom, a.eps[ctx].ep, C.uintptr_t(uintptr(unsafe.Pointer(unsafe.SliceData(r.mem)))), C.size_t(len(r.mem)),
			C.uint64_t(access), C.uint64_t(a.nextKey.Add(1)), boolInt(a.mrMode&C.FI_MR_ENDPOINT != 0), &out.mr, &out.key, &out.desc)
		if rc != 0 {
			a.opts.Logf("rank %d: register region %#x: %v", a.rank, uint64(key), fiErr("fi_mr_reg", C.ssize_t(rc)))
			return 0, 0, 0, 0, stBadKey
		}
		r.mrs[slot], r.keys[slot] = out.mr, uint64(out.key)
	}
	if a.mrMode&C.FI_MR_VIRT_ADDR != 0 {
		base = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(r.mem))))
	}
	return base, uint64(len(r.mem)), r.keys[slot], r.perm, stOK
}

func boolInt(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
