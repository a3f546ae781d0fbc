package amigo

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/amigo-hpc/amigo/internal/memcopy"
	"github.com/amigo-hpc/amigo/internal/order"
	"github.com/amigo-hpc/amigo/internal/ring"
	"github.com/amigo-hpc/amigo/internal/wire"
)

// Config configures a client. The zero value of every field selects its
// default; every field can be overridden by the AMIGO_* environment variable
// named in its comment, which wins over the value in the struct, as UCX_* and
// MPICH_* variables do for those libraries. Settings lists the effective
// values.
type Config struct {
	// Contexts is the number of contexts each rank opens (AMIGO_CONTEXTS,
	// default 1). Every rank of a job must use the same number.
	Contexts int
	// RingSlots is the number of 64-byte slots of each descriptor buffer
	// between two contexts (AMIGO_RING_SLOTS, default 1024: 64 KiB). Left
	// to its default, shared memory makes its buffers larger while a host
	// has few ranks (ShmConfig.RingSlots).
	RingSlots int
	// RDMASlots is the number of descriptors of each RDMA FIFO
	// (AMIGO_RDMA_SLOTS, default 256).
	RDMASlots int
	// InlineMax is the largest header plus data a Send carries inline in the
	// descriptor buffer; larger sends go by rendezvous (AMIGO_INLINE_MAX,
	// default 8192, or the adapters' choice in a job that Open starts:
	// 16896 when every other rank shares the host, 33280 where there are
	// at most 8 ranks on it). It is at most half the descriptor buffer.
	// Left to the adapters, a link may carry less inline while messages
	// sent before are not yet taken by the peer (a window: shared memory
	// carries 16896 then, and announces larger ones, which the receiver
	// fetches together), so whether such a message arrives inline
	// (Message.Inline) depends on the link; with InlineMax set, every Send
	// within it goes inline.
	InlineMax int
	// inlineAuto says InlineMax is the default, not the program's.
	inlineAuto bool
	// ringAuto says RingSlots is the default, not the program's.
	ringAuto bool
	// linkSlots, if not 0, is the smallest descriptor buffer of a link an
	// adapter made, below RingSlots (ofi over ofi_rxm): a packet must fit
	// half of it (packetMax).
	linkSlots int
	// RDMAChunk is the largest piece in which a GET or PUT is handed to an
	// adapter (AMIGO_RDMA_CHUNK, default 1 MiB).
	RDMAChunk int
	// InstructionSlots is the capacity of each context's lock-free queue of
	// posted instructions (AMIGO_INSTRUCTION_SLOTS, default 256). Posts
	// beyond it take a slower, locked path; nothing is refused.
	InstructionSlots int
	// PollBudget is the most packets one Advance takes from each adapter
	// (AMIGO_POLL_BUDGET, default 64).
	PollBudget int
	// SpinIterations is how many idle Advance calls a waiting goroutine makes
	// before it starts yielding the processor (AMIGO_SPIN). Zero, the
	// default, lets the context choose: DedicatedSpin when an adapter
	// between processes reports a processor for each rank of this host,
	// else 1000; on a host with more ranks than processors none (a waiting
	// goroutine yields after every idle Advance), and at most 20 if set.
	SpinIterations int
	// YieldIterations is how many idle Advance calls, each followed by a
	// yield, it then makes before it sleeps (AMIGO_YIELD, default 200); -1
	// (AMIGO_YIELD=0 or -1) for none: the goroutine sleeps right after its
	// spin.
	YieldIterations int
	// OversubscribedProcs is the GOMAXPROCS a rank sets when an adapter
	// between processes reports more ranks on its host than processors
	// (AMIGO_OVERSUBSCRIBED_PROCS, default 1; -1 leaves the runtime's). Such
	// a rank's share of the host is under a processor: a second thread of
	// its own (the runtime waking an idle processor for a goroutine, or
	// spinning to find one) only takes a processor from a peer it waits
	// for. A GOMAXPROCS variable in the environment wins over it.
	OversubscribedProcs int
	// Monitor is the scheduling policy a rank gives the Go runtime's
	// monitor thread (sysmon) while it is open (AMIGO_MONITOR): "batch"
	// (SCHED_BATCH: it keeps its share of the processor but no longer
	// preempts the thread that polls when it wakes, every 20 to 85 us for
	// milliseconds after each sleep of a rank), "idle" (SCHED_IDLE),
	// "normal" (left as it is), or "auto", the default: batch when an
	// adapter between processes reports a processor for each rank of this
	// host, else normal. Close puts back the policy it had. See package
	// internal/sysmon.
	Monitor string
	// Copy is how the data of inline messages is copied into and out of
	// descriptor buffers (AMIGO_COPY): "auto", the default, with the
	// processor's string move (REP MOVSB) from 32 KiB on, and on the
	// sender's side also from 2 up to 8 KiB, where it has its fast form,
	// and with Go's copy otherwise; "go" and "movsb" always with the one.
	// It applies to the whole process. See package internal/memcopy.
	Copy string
	// SleepMax bounds one sleep of a waiting goroutine; a doorbell normally
	// ends the sleep much earlier (AMIGO_SLEEP_MAX, default 1ms).
	SleepMax time.Duration
	// LoopEngine selects where the in-process adapter performs GET and PUT:
	// "inline", in Advance on the initiator's goroutine, or "async", on an
	// engine goroutine per context (AMIGO_LOOP_ENGINE, default "inline").
	LoopEngine string
	// Protocol selects how a Send above InlineMax travels: "stop" announces
	// it and streams its data eagerly, and the receiver may answer STOP;
	// "eager" is the same but a receiver that named a buffer never stops
	// the stream; "rendezvous" announces it by RTS and the receiver GETs
	// everything (AMIGO_PROTOCOL, default "stop").
	Protocol string
	// MidWay is how a Send of a mid-size message travels while the peer
	// has not taken the descriptors sent to it before (a window): "auto"
	// times both ways per peer and takes the faster (mid.go), "inline"
	// always copies it through the descriptor buffer, "announce" always
	// announces it for the receiver to stop and fetch (AMIGO_MID_WAY,
	// default "auto"). Mid-size is the link's range
	// (transport.Link.InlineBusyMin to InlineBusyMax: over shared memory
	// with cross-memory attach, more than 8.5 KiB of header and data up
	// to 16.5 KiB, and up to InlineMax while the receiver leaves inline
	// data where it lay, ring.Reader.SetKeep); it applies only where the
	// program left InlineMax to its adapters' choice.
	MidWay string
	// StopVariant is what a receiver's STOP asks: "keep" (keep the eager
	// data, GET the rest from both ends), "discard" (drop it, GET it all),
	// "put" (name the receive buffer; the sender PUTs the rest), or "auto":
	// discard while less than 2 MiB are still to come, keep
	// above, where fetching from both ends at once pays (AMIGO_STOP_VARIANT,
	// default "auto", chosen by bench/stop.sh: discard stayed within a few
	// percent of plain rendezvous from 256 KiB up, keep beat it by up to
	// 1.5x from 2 MiB up and lost up to 40% below).
	StopVariant string
	// StopAbove: a receiver that names a buffer for a message with more
	// than this many bytes still to come, or defers one, stops the stream
	// and fetches the rest by RDMA (AMIGO_STOP_ABOVE). Zero, the default,
	// lets each adapter choose what it measured (256 KiB over shared
	// memory, where streaming pays longer) and is 64 KiB elsewhere.
	StopAbove int
	// UnexpectedBudget bounds the eager data a context holds for messages
	// whose handler named no buffer yet, in bytes; beyond it the receiver
	// stops streams (AMIGO_UNEXPECTED_BUDGET, default 16 MiB).
	UnexpectedBudget int
	// EagerPacket and EagerPacketMax are the sizes of the first and the
	// largest eager packet of a stream, which grow by doubling
	// (AMIGO_EAGER_PACKET, default 4096; AMIGO_EAGER_PACKET_MAX, default
	// 16384, and at most a quarter of the descriptor buffer).
	EagerPacket    int
	EagerPacketMax int
	// McastChunk is the piece in which multicast data is deposited and
	// forwarded along the chain (AMIGO_MCAST_CHUNK, default 1 MiB: over
	// shared memory with 4 and 8 ranks on two cores, broadcasts of 1 to 64
	// MiB took 1.2 to 2x longer in pieces of 256 KiB, and no less in
	// pieces of 2 MiB).
	McastChunk int
	// EagerInflight, if positive, is how many eager packets of one stream
	// may wait in the injection FIFO for the engine to take them: it paces
	// a stream so that a STOP finds little sent, at the price of a round
	// trip per packet (AMIGO_EAGER_INFLIGHT, default 0: no pacing, which
	// measured faster here, most of all on a loaded machine). With it
	// set, a stream starts at once, paced by its packets; without it, a
	// message the receiver would stop if it named a buffer at once starts
	// streaming only when the receiver, which did not stop it, says GO
	// (see letStream in stop.go).
	EagerInflight int
	// Transport forces the adapter used between processes: "auto" picks
	// shared memory for ranks on the same host and, for the others,
	// libfabric when the build has it and a fabric other than plain TCP is
	// present, else TCP; "shm", "tcp" or "ofi" uses only that one
	// (AMIGO_TRANSPORT, default "auto").
	// A rank always reaches itself through the in-process adapter.
	Transport string
	// Shm tunes the shared-memory adapter between processes of one host
	// (AMIGO_SHM_*; see ShmConfig).
	Shm ShmConfig
	// TCP tunes the TCP adapter between hosts (AMIGO_TCP_*; see TCPConfig).
	TCP TCPConfig
	// OFI tunes the libfabric adapter between hosts, in builds with the
	// tag ofi (AMIGO_OFI_*; see OFIConfig).
	OFI OFIConfig
	// OnError, if set, receives errors that belong to no operation: a packet
	// for an unregistered dispatch id that asked for no acknowledgement
	// (a *DispatchError, at its receiver and at its sender), a malformed
	// packet, an acknowledgement of an unknown operation. It runs inside
	// Advance. The errors are counted in Stats either way.
	OnError func(error)
	// Handlers, if set, are registered for their dispatch ids on every
	// context of the client before any peer can reach it, as SetDispatch
	// would: a message sent the moment a peer's Open returned finds them.
	Handlers map[Dispatch]Handler
	// DispatchGrace is how long a message for a dispatch id with no handler
	// is held for one to be registered before it is refused with
	// ErrNoDispatch (AMIGO_DISPATCH_GRACE, default 1s; negative: refused at
	// once). Held messages count against UnexpectedBudget; a message that
	// finds it full is refused at once.
	DispatchGrace time.Duration
}

// Setting is one effective configuration value.
type Setting struct {
	Name  string // environment variable
	Value string
	Doc   string
}

type setting struct {
	name string
	doc  string
	get  func(*Config) string
	set  func(*Config, string) error
}

func intSetting(name, doc string, f func(*Config) *int) setting {
	return setting{
		name: name, doc: doc,
		get: func(c *Config) string { return strconv.Itoa(*f(c)) },
		set: func(c *Config, v string) error {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return err
			}
			*f(c) = n
			return nil
		},
	}
}

var settings = []setting{
	intSetting("AMIGO_CONTEXTS", "contexts per rank", func(c *Config) *int { return &c.Contexts }),
	intSetting("AMIGO_RING_SLOTS", "64-byte slots per descriptor buffer", func(c *Config) *int { return &c.RingSlots }),
	intSetting("AMIGO_RDMA_SLOTS", "descriptors per RDMA FIFO", func(c *Config) *int { return &c.RDMASlots }),
	intSetting("AMIGO_INLINE_MAX", "largest header+data sent inline, bytes", func(c *Config) *int { return &c.InlineMax }),
	intSetting("AMIGO_RDMA_CHUNK", "largest GET/PUT piece handed to an adapter, bytes", func(c *Config) *int { return &c.RDMAChunk }),
	intSetting("AMIGO_INSTRUCTION_SLOTS", "lock-free instruction queue capacity per context", func(c *Config) *int { return &c.InstructionSlots }),
	intSetting("AMIGO_POLL_BUDGET", "packets taken per adapter per Advance", func(c *Config) *int { return &c.PollBudget }),
	intSetting("AMIGO_SPIN", "idle Advance calls before yielding (0: the context's choice)", func(c *Config) *int { return &c.SpinIterations }),
	{
		name: "AMIGO_YIELD", doc: "yielding idle Advance calls before sleeping (0 or -1: none)",
		get: func(c *Config) string { return strconv.Itoa(c.YieldIterations) },
		set: func(c *Config, v string) error {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return err
			}
			if n == 0 {
				n = -1 // the field's zero is the default
			}
			c.YieldIterations = n
			return nil
		},
	},
	intSetting("AMIGO_OVERSUBSCRIBED_PROCS", "GOMAXPROCS of a rank on a host with more ranks than processors (-1: leave it)", func(c *Config) *int { return &c.OversubscribedProcs }),
	{
		name: "AMIGO_SLEEP_MAX", doc: "longest single sleep of a waiting goroutine",
		get: func(c *Config) string { return c.SleepMax.String() },
		set: func(c *Config, v string) error {
			d, err := time.ParseDuration(strings.TrimSpace(v))
			if err != nil {
				return err
			}
			c.SleepMax = d
			return nil
		},
	},
	{
		name: "AMIGO_DISPATCH_GRACE", doc: "how long a message waits for its handler to be registered (negative: not at all)",
		get: func(c *Config) string { return c.DispatchGrace.String() },
		set: func(c *Config, v string) error {
			d, err := time.ParseDuration(strings.TrimSpace(v))
			if err != nil {
				return err
			}
			c.DispatchGrace = d
			return nil
		},
	},
	{
		// Process-wide, read when the process starts (package
		// internal/order); listed for what it says about this process.
		name: "AMIGO_FENCED_STORES", doc: "1: publish descriptors with fenced stores; shown: 0 while this process uses release stores",
		get: func(*Config) string {
			if order.Relaxed() {
				return "0"
			}
			return "1"
		},
		set: func(_ *Config, v string) error {
			if v = strings.TrimSpace(v); v != "0" && v != "1" {
				return fmt.Errorf("want 0 or 1")
			}
			return nil
		},
	},
	intSetting("AMIGO_STOP_ABOVE", "bytes still to come above which a receiver stops an eager stream (0: the adapter's choice)", func(c *Config) *int { return &c.StopAbove }),
	intSetting("AMIGO_UNEXPECTED_BUDGET", "eager bytes held for messages with no buffer yet, per context", func(c *Config) *int { return &c.UnexpectedBudget }),
	intSetting("AMIGO_EAGER_PACKET", "first eager packet of a stream, bytes", func(c *Config) *int { return &c.EagerPacket }),
	intSetting("AMIGO_EAGER_PACKET_MAX", "largest eager packet, bytes", func(c *Config) *int { return &c.EagerPacketMax }),
	intSetting("AMIGO_MCAST_CHUNK", "multicast deposit and forwarding piece, bytes", func(c *Config) *int { return &c.McastChunk }),
	intSetting("AMIGO_EAGER_INFLIGHT", "eager packets of a stream waiting for the engine", func(c *Config) *int { return &c.EagerInflight }),
	{
		name: "AMIGO_PROTOCOL", doc: "large sends: stop, eager or rendezvous",
		get: func(c *Config) string { return c.Protocol },
		set: func(c *Config, v string) error { c.Protocol = strings.TrimSpace(v); return nil },
	},
	{
		name: "AMIGO_MID_WAY", doc: "a window's mid-size sends: auto, inline or announce",
		get: func(c *Config) string { return c.MidWay },
		set: func(c *Config, v string) error { c.MidWay = strings.TrimSpace(v); return nil },
	},
	{
		name: "AMIGO_STOP_VARIANT", doc: "what STOP asks: auto, keep, discard or put",
		get: func(c *Config) string { return c.StopVariant },
		set: func(c *Config, v string) error { c.StopVariant = strings.TrimSpace(v); return nil },
	},
	{
		name: "AMIGO_TRANSPORT", doc: "adapter between processes: auto, shm or tcp",
		get: func(c *Config) string { return c.Transport },
		set: func(c *Config, v string) error { c.Transport = strings.TrimSpace(v); return nil },
	},
	{
		name: "AMIGO_MONITOR", doc: "scheduling policy of the Go runtime's monitor thread while a rank polls: auto, batch, idle or normal",
		get: func(c *Config) string { return c.Monitor },
		set: func(c *Config, v string) error { c.Monitor = strings.TrimSpace(v); return nil },
	},
	{
		name: "AMIGO_COPY", doc: "copy of inline data into and out of descriptor buffers: auto (the string move from 32 KiB, the sender's also from 2 to 8 KiB), go or movsb",
		get: func(c *Config) string { return c.Copy },
		set: func(c *Config, v string) error { c.Copy = strings.TrimSpace(v); return nil },
	},
	{
		name: "AMIGO_LOOP_ENGINE", doc: "in-process GET/PUT engine: inline or async",
		get: func(c *Config) string { return c.LoopEngine },
		set: func(c *Config, v string) error { c.LoopEngine = strings.TrimSpace(v); return nil },
	},
}

// resolve applies the environment and the defaults, and validates.
func (c Config) resolve(environ func(string) (string, bool)) (Config, error) {
	for _, s := range settings {
		if v, ok := environ(s.name); ok && v != "" {
			if err := s.set(&c, v); err != nil {
				return c, fmt.Errorf("amigo: %s=%q: %v", s.name, v, err)
			}
		}
	}
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&c.Contexts, 1)
	c.ringAuto = c.RingSlots == 0
	def(&c.RingSlots, 1024)
	def(&c.RDMASlots, 256)
	if c.InlineMax == 0 {
		c.InlineMax = min(8192, ring.MaxPayload(c.RingSlots)-wire.AMSize(0, 0, true))
		c.inlineAuto = true
	}
	def(&c.RDMAChunk, 1<<20)
	def(&c.InstructionSlots, 256)
	def(&c.PollBudget, 64)
	def(&c.YieldIterations, 200)
	def(&c.OversubscribedProcs, 1)
	if c.SleepMax == 0 {
		c.SleepMax = time.Millisecond
	}
	if c.DispatchGrace == 0 {
		c.DispatchGrace = time.Second
	}
	if c.LoopEngine == "" {
		c.LoopEngine = "inline"
	}
	if c.Transport == "" {
		c.Transport = "auto"
	}
	if c.MidWay == "" {
		c.MidWay = "auto"
	}
	if c.Protocol == "" {
		c.Protocol = "stop"
	}
	if c.Monitor == "" {
		c.Monitor = "auto"
	}
	if c.Copy == "" {
		c.Copy = "auto"
	}
	if c.StopVariant == "" {
		c.StopVariant = "auto"
	}
	def(&c.UnexpectedBudget, 16<<20)
	def(&c.EagerPacket, 4096)
	def(&c.EagerPacketMax, 16384)
	def(&c.McastChunk, 1<<20)
	if err := c.validate(); err != nil {
		return c, err
	}
	for _, r := range resolvers {
		if err := r(&c); err != nil {
			return c, err
		}
	}
	return c, nil
}

// resolvers complete the settings that adapters' files add to settings:
// their defaults and their checks, after the environment was applied.
var resolvers []func(*Config) error

func pow2(n int) bool { return n > 0 && n&(n-1) == 0 }

func (c *Config) validate() error {
	switch {
	case c.Contexts < 1 || c.Contexts > 1<<10:
		return fmt.Errorf("amigo: Contexts %d: want 1 to 1024", c.Contexts)
	case !pow2(c.RingSlots) || c.RingSlots < 16 || c.RingSlots > ring.MaxSlots:
		return fmt.Errorf("amigo: RingSlots %d: want a power of two in [16, %d]", c.RingSlots, ring.MaxSlots)
	case !pow2(c.RDMASlots) || c.RDMASlots > 1<<16:
		return fmt.Errorf("amigo: RDMASlots %d: want a power of two up to 65536", c.RDMASlots)
	case c.InlineMax < 0 || wire.AMSize(c.InlineMax, 0, true) > ring.MaxPayload(c.RingSlots):
		return fmt.Errorf("amigo: InlineMax %d: want 0 to %d for %d ring slots", c.InlineMax, ring.MaxPayload(c.RingSlots)-wire.AMSize(0, 0, true), c.RingSlots)
	case c.RDMAChunk < 4096:
		return fmt.Errorf("amigo: RDMAChunk %d: want at least 4096", c.RDMAChunk)
	case !pow2(c.InstructionSlots) || c.InstructionSlots < 2 || c.InstructionSlots > 1<<20:
		return fmt.Errorf("amigo: InstructionSlots %d: want a power of two in [2, 1048576]", c.InstructionSlots)
	case c.PollBudget < 1:
		return fmt.Errorf("amigo: PollBudget %d: want at least 1", c.PollBudget)
	case c.OversubscribedProcs < -1:
		return fmt.Errorf("amigo: OversubscribedProcs %d: want -1 or more", c.OversubscribedProcs)
	case c.SpinIterations < 0 || c.YieldIterations < -1:
		return fmt.Errorf("amigo: negative spin or yield iterations (YieldIterations -1: none)")
	case c.SleepMax < time.Microsecond:
		return fmt.Errorf("amigo: SleepMax %v: want at least 1µs", c.SleepMax)
	case c.LoopEngine != "inline" && c.LoopEngine != "async":
		return fmt.Errorf("amigo: LoopEngine %q: want inline or async", c.LoopEngine)
	case c.Protocol != "stop" && c.Protocol != "eager" && c.Protocol != "rendezvous":
		return fmt.Errorf("amigo: Protocol %q: want stop, eager or rendezvous", c.Protocol)
	case c.MidWay != "auto" && c.MidWay != "inline" && c.MidWay != "announce":
		return fmt.Errorf("amigo: MidWay %q: want auto, inline or announce", c.MidWay)
	case c.StopVariant != "keep" && c.StopVariant != "discard" && c.StopVariant != "put" && c.StopVariant != "auto":
		return fmt.Errorf("amigo: StopVariant %q: want auto, keep, discard or put", c.StopVariant)
	case c.StopAbove < 0 || c.UnexpectedBudget < 0:
		return fmt.Errorf("amigo: negative StopAbove or UnexpectedBudget")
	case c.McastChunk < 4096:
		return fmt.Errorf("amigo: McastChunk %d: want at least 4096", c.McastChunk)
	case c.EagerInflight < 0:
		return fmt.Errorf("amigo: EagerInflight %d: want 0 (no pacing) or more", c.EagerInflight)
	case c.EagerPacket < 64 || c.EagerPacketMax < c.EagerPacket:
		return fmt.Errorf("amigo: EagerPacket %d, EagerPacketMax %d: want 64 <= first <= largest", c.EagerPacket, c.EagerPacketMax)
	case c.Monitor != "auto" && c.Monitor != "batch" && c.Monitor != "idle" && c.Monitor != "normal":
		return fmt.Errorf("amigo: Monitor %q: want auto, batch, idle or normal", c.Monitor)
	case !validCopy(c.Copy):
		return fmt.Errorf("amigo: Copy %q: want auto, go or movsb", c.Copy)
	case c.Transport != "auto" && c.Transport != "shm" && c.Transport != "tcp" && c.Transport != "ofi":
		return fmt.Errorf("amigo: Transport %q: want auto, shm, tcp or ofi", c.Transport)
	}
	for d, fn := range c.Handlers {
		if d >= MaxDispatch {
			return fmt.Errorf("amigo: Handlers: dispatch %d: %w", d, ErrBadDispatch)
		}
		if fn == nil {
			return fmt.Errorf("amigo: Handlers: dispatch %d: nil handler", d)
		}
	}
	return nil
}

// Settings returns the effective value of every setting for cfg in this
// process's environment, or the error that would make a client refuse it.
func Settings(cfg Config) ([]Setting, error) {
	eff, err := cfg.resolve(os.LookupEnv)
	out := make([]Setting, 0, len(settings))
	for _, s := range settings {
		out = append(out, Setting{Name: s.name, Value: s.get(&eff), Doc: s.doc})
	}
	return out, err
}

// defaultStopAbove is Config.StopAbove on links whose adapter did not choose.
const defaultStopAbove = 64 << 10

// packetMax is the largest packet every link carries: half the smallest
// descriptor buffer.
func (c *Config) packetMax() int {
	slots := c.RingSlots
	if c.linkSlots != 0 && c.linkSlots < slots {
		slots = c.linkSlots
	}
	return ring.MaxPayload(slots)
}

// validCopy reports whether s names a Config.Copy.
func validCopy(s string) bool {
	_, ok := memcopy.ParseMode(s)
	return ok
}
