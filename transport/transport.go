// Package transport is the contract between amigo's messaging interface and
// the adapters that move bytes: in-process (loop), shared memory between
// processes (shm) and sockets between hosts (tcp).
//
// Every adapter offers the same shape, after the communications adapters of a
// parallel computer:
//
//   - For each remote context it reaches, a Link carrying two injection FIFOs.
//     Msg is a descriptor buffer (package internal/ring) in which the AMI writes
//     packets with their data inline; the adapter's engine on the far side
//     consumes it in order, asynchronously, and increments the ring's transfer
//     counter per descriptor. RDMA is a FIFO of one-sided GET and PUT
//     descriptors that the adapter's engine performs in order, incrementing its
//     own transfer counter. The AMI keeps the completion bookkeeping of both
//     (package internal/fifo); the adapter never calls back into the AMI.
//   - A reception path: Port.Poll hands every arrived packet to a Receiver, on
//     the goroutine that polls, in the order each link delivered them.
//   - One-sided access to registered memory (Regions), addressed by (key,
//     offset, length) and checked by the side that owns the memory.
//
// # The contract
//
// An adapter implements Adapter, and its ports Port. Beyond those, the AMI
// looks for the optional interfaces below on the Adapter, by type
// assertion, and does without what an adapter lacks:
//
//   - Starter: setting up that needs every rank's published address
//     (connecting, mapping peers' segments), run after the job's fence.
//   - DoorbellProvider: doorbells in memory that peers in other processes
//     can ring, so a sleeping context wakes whichever adapter brings work.
//   - Allocator: memory peers of this host reach without the owner (a
//     shared segment), used by Client.AllocMemory and AllocAll.
//   - Oversubscriber: whether more ranks share this host than it has
//     processors, which sets the idle policy of waiting contexts.
//   - HostMapper: which ranks share this host (Client.SameHost, the
//     topology queries).
//
// Each adapter of this module asserts at compile time the interfaces it
// implements (var _ transport.Starter = (*Adapter)(nil)), so a change to
// one of them cannot silently drop a capability.
//
// Nothing under transport imports the AMI.
package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/amigo-hpc/amigo/internal/ring"
)

// Addr names a context of a job: a rank and a context index within it.
type Addr struct {
	Rank    int32
	Context int32
}

func (a Addr) String() string { return fmt.Sprintf("rank %d context %d", a.Rank, a.Context) }

// Receiver takes arrived packets. pkt is valid only until Receive returns.
type Receiver interface {
	Receive(from Addr, pkt []byte)
}

// A RingReceiver is a Receiver that can take data out of the descriptor
// buffer a packet lies in with ring.Reader.CopyOut: PollRing names the
// reader before it hands over a descriptor the reader holds slots of
// (ring.Reader.Holds) and nil after, so that data copied out while
// Receive runs is known to have been read (its slots are zeroed at the
// give-back, see ring.Reader.SetKeep) and a large descriptor's gives the
// buffer's room back as it goes.
type RingReceiver interface {
	Receiver
	FromRing(rd *ring.Reader)
}

// A KeepCounter is a Port whose descriptor buffers' readers measure how to
// give back the slots of data not copied out (ring.KeepMeasured): it
// returns their epochs, given back zeroed and unzeroed. It is called by
// the goroutine that polls the port.
type KeepCounter interface {
	KeepEpochs() (zeroed, kept uint64)
}

// PollRing is an adapter's Poll of one descriptor buffer it reads in place
// (loop, shm): it first gives back the slots the last call consumed (after
// whatever the program did in between, answers included: see
// ring.Reader.Consume), then hands up to budget descriptors to r as from
// sent them, consuming each (and counting them as transfers once, after
// the last), and gives the slots back at once if half the
// ring is held. It returns how many it handed over, whether the producer
// should be woken (it may wait for room or for these transfers), and the
// ring's corruption, after which rd must not be read again. A
// RingReceiver is handed the descriptors with the reader named.
func PollRing(rd *ring.Reader, from Addr, r Receiver, budget int) (got int, wake bool, err error) {
	freed := rd.Flush()
	if rd.Pending() {
		rr, _ := r.(RingReceiver)
		for got < budget {
			var pkt []byte
			if pkt, err = rd.Take(); pkt == nil {
				break
			}
			// Only a descriptor the reader holds slots of is worth
			// naming it for: the calls cost a small message's latency.
			if rr != nil && rd.Holds() {
				rr.FromRing(rd)
				r.Receive(from, pkt)
				rr.FromRing(nil)
			} else {
				r.Receive(from, pkt)
			}
			got++
		}
		rd.Count()
		if err != nil {
			return got, freed || got > 0, err
		}
		if rd.Unreleased() >= rd.Slots()/2 {
			freed = rd.Flush() || freed
		}
	}
	return got, freed || got > 0, nil
}

// Adapter attaches one client (one rank's membership in a job) to a fabric.
type Adapter interface {
	// Name is the adapter's short name: "loop", "shm", "tcp".
	Name() string
	// Reaches reports whether the adapter can carry traffic to rank.
	Reaches(rank int) bool
	// Open opens the port of local context ctx. bell is the context's
	// doorbell: the adapter rings it whenever it has made work available to
	// the context (a packet arrived, a transfer the context injected
	// completed).
	Open(ctx int, bell *Doorbell) (Port, error)
	// Close closes every port and releases the adapter's resources.
	Close() error
}

// Port is one local context's attachment to an adapter. Its methods are
// called by the goroutine that owns the context.
type Port interface {
	// Link returns the link to the remote context to, creating it on first
	// use. It is a slow path.
	Link(to Addr) (*Link, error)
	// Poll hands up to budget arrived packets to r and returns how many.
	Poll(r Receiver, budget int) int
	// Progress lets an adapter whose engine is software run it on the
	// caller's goroutine. It returns the number of descriptors processed.
	Progress() int
	// Close detaches the context. Links to it fail; packets not yet polled
	// are dropped.
	Close() error
}

// Link is the injection side of the path from a local context to a remote
// context. The adapter fills it in once; the AMI uses its FIFOs directly.
type Link struct {
	To Addr
	// Msg is the descriptor buffer for packets to To. The AMI is its only
	// producer.
	Msg *ring.Ring
	// MsgBell is the doorbell of Msg's consumer; the AMI rings it after it
	// published descriptors.
	MsgBell *Doorbell
	// Push, if set on a link without MsgBell, is called by the AMI after it
	// published a descriptor of one slot from a Send, on the goroutine that
	// holds the context: an adapter whose engine runs on that goroutine
	// (Port.Progress) may write the descriptor out at once instead of at
	// the next Progress. Push must not block, and leaves descriptors to
	// Progress when writing now would cost more than it saves (a window of
	// messages that would go in one write).
	Push func()
	// SendNow, if set, is offered by the AMI a packet of one slot that has
	// no done callback, from a Send on the goroutine that holds the
	// context, before it writes the packet into Msg. An adapter that can
	// send it at once, ahead of nothing (every descriptor of Msg sent and
	// taken by the target), sends it and reports true; the packet then
	// counts as a descriptor the AMI injected outside Msg
	// (fifo.Tracker.InjectOutside), which the adapter adds to Msg's
	// transfer counter once the target took it, in order with the rest
	// (ring.Reader.CountOutside). Otherwise it reports false, and the AMI
	// writes the packet into Msg. pkt is valid only during the call.
	SendNow func(pkt []byte) bool
	// RDMA is the FIFO of one-sided operations on To's registered memory.
	RDMA *RDMAQueue
	// MaxRDMA is the largest Get or Put the engine takes in one descriptor;
	// the AMI splits larger ones. Zero means no limit.
	MaxRDMA int
	// StopAbove is the adapter's measured choice for amigo.Config.StopAbove
	// on this link: the bytes still to come of a message above which
	// fetching the rest by RDMA beats streaming it in eager packets. Zero
	// leaves the AMI's default; a value the program sets wins over both.
	StopAbove int
	// StopBusyAbove is the same threshold for a message that arrives while
	// other messages of the same peer are still in progress at the
	// receiver: there, the rest is fetched together with theirs (an
	// adapter that moves several GETs toward one owner at once, say), and
	// that may pay from a much smaller size than for a lone message. Zero
	// means StopAbove.
	StopBusyAbove int
	// InlineBusyMax is the most header plus data of a Send that travels
	// inline while descriptors sent earlier to the same peer are not yet
	// taken (a window of messages): a larger one goes as a large message,
	// which the receiver may stop and fetch together with the others
	// (StopBusyAbove). A lone message, the one a peer waits for, still
	// goes inline up to amigo.Config.InlineMax. Zero means no such limit;
	// the AMI applies it only where the program left Config.InlineMax to
	// its adapters' choice.
	InlineBusyMax int
	// InlineBusyMin, below InlineBusyMax, opens a range of sizes that go
	// either way in a window: a Send of more header plus data than it, up
	// to InlineBusyMax, goes inline or as a large message while the
	// descriptors sent earlier are not yet taken, whichever the AMI
	// measured faster toward the peer (amigo.Config.MidWay). Zero means
	// no such range.
	InlineBusyMin int
	// Shared says that Msg lies in memory the consumer reads directly (the
	// same process, or a segment both processes map): a descriptor is in
	// the consumer's hands once published, and the AMI completes an inline
	// send at once instead of waiting for the transfer counter. An adapter
	// that still has bytes to move after publication (a socket) leaves it
	// false.
	Shared bool
	// Ordered says that RDMA requests and packets to To travel one ordered
	// stream and that the target lands a Put's data before it reads what
	// was sent after it: a packet injected after a Put is handled after
	// the Put's data is in place, with no fence.
	Ordered bool
	// Atomic, if not nil, performs an atomic at once on the caller's
	// goroutine when the adapter can without anyone's help (the shm
	// adapter, on a word of a shared allocation): it reports whether it
	// did, with the word's old value and the outcome. The operation and
	// width are valid (CheckAtomic). It is called by the goroutine that
	// holds the context, only while the link's RDMA FIFO is empty, so that
	// it does not overtake earlier descriptors.
	Atomic func(a AtomicArgs) (old uint64, done bool, err error)
	// Copy, if not nil, performs a small Get or Put (k) of local at
	// (key, off) of To's memory at once on the caller's goroutine when the
	// adapter can without anyone's help (the shm adapter, on a region of a
	// shared allocation): it reports whether it did. It does nothing and
	// reports false for anything it cannot serve so (another kind of
	// memory, an access the owner would refuse, a failed link), which the
	// RDMA FIFO then carries and reports. It is called as Atomic is.
	Copy func(k RDMAKind, local []byte, key Key, off uint64) bool

	err atomic.Pointer[error]
}

// Err returns the error that failed the link, or nil while it works.
func (l *Link) Err() error {
	if p := l.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Fail marks the link broken with err, once. Every operation on it from now
// on completes with that error.
func (l *Link) Fail(err error) {
	l.err.CompareAndSwap(nil, &err)
}

// PeerError reports an operation that failed because of the peer at Addr.
type PeerError struct {
	Addr Addr
	Err  error
}

func (e *PeerError) Error() string { return fmt.Sprintf("amigo: %v: %v", e.Addr, e.Err) }
func (e *PeerError) Unwrap() error { return e.Err }

// Errors adapters report.
var (
	// ErrClosed reports a port, context or adapter that has been closed.
	ErrClosed = errors.New("closed")
	// ErrUnreachable reports a peer the adapter cannot reach.
	ErrUnreachable = errors.New("unreachable")
	// ErrCorrupt reports a peer that wrote something no correct peer writes.
	ErrCorrupt = errors.New("corrupt data from peer")
)

// Bootstrap is what adapters need from the launcher of a job: a key-value
// space in which to publish addresses, which ranks share a host, and the job's
// secret. The bootstrap package's Job satisfies it.
type Bootstrap interface {
	Rank() int
	Size() int
	// Put publishes a value; peers see it after the job's next fence.
	Put(key string, value []byte) error
	// Get returns a value rank published before the last fence.
	Get(ctx context.Context, rank int, key string) ([]byte, error)
	// Node returns the host index of rank: equal values share a host.
	Node(rank int) int
	// Secret is the job's shared secret.
	Secret() []byte
}

// Starter is implemented by adapters that finish setting up once every rank
// has published its address (after the fence that follows their creation).
type Starter interface {
	Start(ctx context.Context) error
}

// DoorbellProvider is implemented by adapters whose peers in other processes
// must be able to wake a local context: the doorbell it returns for a
// context lives in memory those peers share, and the context sleeps on it
// whichever adapter delivers the work.
type DoorbellProvider interface {
	Doorbell(ctx int) (*Doorbell, error)
}

// Allocator is implemented by adapters that can allocate memory the peers
// of this host map: regions registered in it are read and written by the
// initiator itself. The memory stays valid until the adapter closes.
type Allocator interface {
	Alloc(n int) ([]byte, error)
}

// Oversubscriber is implemented by adapters that know how many ranks share
// this host: Oversubscribed reports more of them than this process has
// processors (Processors), and waiting contexts then give their processor
// away soon rather than spin.
type Oversubscriber interface {
	Oversubscribed() bool
}

// HostMapper is implemented by adapters that know which ranks share this
// rank's host.
type HostMapper interface {
	SameHost(rank int) bool
}

// LauncherRouteIP returns the local address of the route to the launcher's
// PMI server (PMI_PORT), if the rank reached it over the network: the
// address through which the hosts of the job reach each other, which an
// adapter that addresses peers by IP publishes.
func LauncherRouteIP() string {
	port := os.Getenv("PMI_PORT")
	if port == "" {
		return ""
	}
	// A UDP "connection" sends nothing; it only picks the route.
	c, err := net.Dial("udp", port)
	if err != nil {
		return ""
	}
	defer c.Close()
	ip := c.LocalAddr().(*net.UDPAddr).IP
	if ip.IsUnspecified() {
		return ""
	}
	return ip.String()
}

// Processors returns the number of processors this process may run on: its
// CPU affinity mask, or the machine's count if that is unknown. An adapter
// compares it with the ranks of the job on this host to say whether the host
// is oversubscribed.
func Processors() int {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) == nil && set.Count() > 0 {
		return set.Count()
	}
	return runtime.NumCPU()
}

// CPUsKey is the bootstrap key under which an adapter publishes this
// process's affinity mask (PublishAffinity), so that HostProcessors can count
// the processors the ranks of a host may run on together. Each adapter that
// publishes uses its own key: the key space is shared by the job.
func CPUsKey(adapter string) string { return "amigo." + adapter + ".cpus" }

// cpuMaskBytes is the most bytes of a published affinity mask: one bit a
// processor, as many as sched_getaffinity(2) fills in unix.CPUSet.
const cpuMaskBytes = int(unsafe.Sizeof(unix.CPUSet{}))

// AffinityMask returns this process's affinity mask, a bit a processor (bit
// i of byte j for processor 8j+i), without its trailing zero bytes.
func AffinityMask() ([]byte, bool) {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil || set.Count() == 0 {
		return nil, false
	}
	out := make([]byte, 0, cpuMaskBytes)
	for _, w := range set {
		out = binary.LittleEndian.AppendUint64(out, uint64(w))
	}
	for len(out) > 1 && out[len(out)-1] == 0 {
		out = out[:len(out)-1]
	}
	return out, true
}

// PublishAffinity publishes this process's affinity mask under key; a
// process whose mask cannot be read publishes nothing.
func PublishAffinity(job Bootstrap, key string) error {
	if mask, ok := AffinityMask(); ok {
		return job.Put(key, mask)
	}
	return nil
}

// HostProcessors returns the number of processors the ranks of this host
// may run on together: the union of the affinity masks they published
// under key (PublishAffinity, before the job's last fence), or 0 if one is
// missing. Ranks bound one to a processor each are not oversubscribed,
// although each may run on one processor only; four ranks all bound to the
// same two processors are. Waiting contexts choose how to wait by it
// (Oversubscriber).
func HostProcessors(ctx context.Context, job Bootstrap, key string) int {
	var union [cpuMaskBytes]byte
	me := job.Rank()
	for r := 0; r < job.Size(); r++ {
		if job.Node(r) != job.Node(me) {
			continue
		}
		var v []byte
		if r == me {
			v, _ = AffinityMask()
		} else {
			v, _ = job.Get(ctx, r, key)
		}
		if len(v) == 0 || len(v) > cpuMaskBytes {
			return 0
		}
		for i, b := range v {
			union[i] |= b
		}
	}
	n := 0
	for _, b := range union {
		n += bits.OnesCount8(b)
	}
	return n
}
