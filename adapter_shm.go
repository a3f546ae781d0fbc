package amigo

import (
	"context"
	"fmt"
	"strings"

	"github.com/amigo-hpc/amigo/transport"
	"github.com/amigo-hpc/amigo/transport/shm"
)

// ShmConfig tunes the shared-memory adapter, which carries traffic between
// ranks that run on the same host. Every field is overridden by the AMIGO_SHM_*
// variable named in its comment.
type ShmConfig struct {
	// RDMA forces how GET, PUT and the data of large sends move: "auto"
	// picks per transfer (a region in a shared segment from AllocMemory is
	// copied straight by the initiator; other memory, where the kernel
	// allows cross-memory attach, by it under 128 KiB and above by
	// whichever of it and the pipelined copy through shared chunks the
	// adapter measured faster toward that peer; else by the pipelined
	// copy); "segment", "cma" or "copy" forces one way, and a
	// transfer it cannot serve fails (AMIGO_SHM_RDMA, default "auto").
	RDMA string
	// CMA is "auto" (probe cross-memory attach toward each peer at start)
	// or "off" (AMIGO_SHM_CMA, default "auto").
	CMA string
	// Help is "on" to let the owner of the memory, when it advances, copy
	// part of a large transfer on its side while the initiator copies the
	// rest, or "off" (AMIGO_SHM_HELP, default "on").
	Help string
	// HelpMin is the smallest transfer split with the owner, in bytes
	// (AMIGO_SHM_HELP_MIN, default 131072).
	HelpMin int
	// Huge is "on" to have the kernel back the Go memory that large
	// cross-memory attach transfers touch with huge pages (a one-time
	// MADV_COLLAPSE of each 2 MiB block such a buffer covers a quarter
	// MiB of or more; the kernel pins huge pages several times faster
	// than small ones), or "off" (AMIGO_SHM_HUGE, default "on").
	Huge string
	// Keep is how a receiver gives the slots of an inline message of 2
	// KiB or more whose data its handler did not copy out (Message.CopyTo,
	// Receive) back to the sender: "auto" zeroes them or leaves them as
	// they are, whichever moved such messages faster from that sender
	// (measured in epochs of 4 MiB, leaving them first and zeroing only
	// once that measured a quarter faster), "on" always leaves them,
	// "off" always zeroes them (AMIGO_SHM_KEEP, default "auto"; see
	// ring.Reader.SetKeep). While a receiver leaves most of the data it
	// gets unzeroed, the sender wraps its messages of up to 10 KiB at
	// 2048 slots (or 28 messages of the last size, if more), so that the
	// lines it writes stay in its cache.
	Keep string
	// Chunk and Chunks size a ring of the pipelined copy (AMIGO_SHM_CHUNK,
	// default 65536 bytes; AMIGO_SHM_CHUNKS, default 16).
	Chunk, Chunks int
	// ChunkRings is how many rings of the pipelined copy each rank keeps
	// for the copies of its memory in flight, shared by all its peers
	// (AMIGO_SHM_CHUNK_RINGS, default 2).
	ChunkRings int
	// Mirror is how many registered regions peers resolve without the
	// owner's help (AMIGO_SHM_MIRROR, default 16384).
	Mirror int
	// Piece is the most bytes one Advance moves for one transfer, so that
	// large transfers do not hold up small messages (AMIGO_SHM_PIECE,
	// default 262144).
	Piece int
	// RingSlots is the number of 64-byte slots of each descriptor buffer
	// between two contexts of one host (AMIGO_SHM_RING_SLOTS; never fewer
	// than Config.RingSlots). Default 0: Config.RingSlots if the program
	// set it, else chosen by the number of ranks on the host, 8192 up to 4
	// ranks, 4096 up to 8, 2048 at 16, 1024 from 32 on, so that the
	// buffers into a rank take at most 2 MiB (shm.RingSlotsFor).
	RingSlots int
}

// shmInline is shared memory's choice of Config.InlineMax (see
// processAdapter.inline): a message of 16 KiB with a header of up to 512
// bytes. Windows of 16 KiB messages (osu_bw, two ranks on two cores)
// moved 7 to 25% more inline, both sides copying through the descriptor
// buffer, than announced, stopped and fetched by cross-memory attach (three
// series of four interleaved rounds); at 32 KiB inline moved no more, and
// took half the buffer of 1024 slots. Over buffers of 4096 slots or more
// (up to 8 ranks on a host, shm.RingSlotsFor) the choice is 32 KiB
// (shmInlineLarge), an eighth of the buffer: 32 KiB moved 1.28x as fast
// inline as by cross-memory attach (medians of 6 interleaved rounds, OSU's
// counts, by round 1.13-1.34x; 1-16 KiB and 64-128 KiB did not move).
// That holds for a lone message; in a window, above 16 KiB, a message goes
// inline only when the peer has taken the ones before it
// (transport.Link.InlineBusyMax, set by package shm), or while the peer
// leaves inline data where it lay and inline measured faster (mid.go).
const (
	shmInline      = 16<<10 + 512
	shmInlineLarge = 32<<10 + 512
	// shmInlineLargeSlots: the fewest slots of a buffer that gets
	// shmInlineLarge.
	shmInlineLargeSlots = 4096
)

// shmInlineFor is shared memory's choice of Config.InlineMax for the
// adapter it opened.
func shmInlineFor(a transport.Adapter) int {
	if s, ok := a.(*shm.Adapter); ok && s.RingSlots() >= shmInlineLargeSlots {
		return shmInlineLarge
	}
	return shmInline
}

func init() {
	registerProcessAdapter(processAdapter{name: "shm", prefer: 10, inline: shmInline, inlineFor: shmInlineFor, open: openShm})
	str := func(name, doc string, f func(*Config) *string) setting {
		return setting{
			name: name, doc: doc,
			get: func(c *Config) string { return *f(c) },
			set: func(c *Config, v string) error { *f(c) = strings.TrimSpace(v); return nil },
		}
	}
	settings = append(settings,
		str("AMIGO_SHM_RDMA", "shared memory, large transfers: auto, segment, cma or copy", func(c *Config) *string { return &c.Shm.RDMA }),
		str("AMIGO_SHM_CMA", "shared memory, cross-memory attach: auto or off", func(c *Config) *string { return &c.Shm.CMA }),
		str("AMIGO_SHM_HELP", "shared memory, owner copies part of large transfers: on or off", func(c *Config) *string { return &c.Shm.Help }),
		str("AMIGO_SHM_KEEP", "shared memory, slots of inline data the handler did not copy out given back unzeroed: auto, on or off", func(c *Config) *string { return &c.Shm.Keep }),
		str("AMIGO_SHM_HUGE", "shared memory, huge pages under Go memory that cross-memory attach moves: on or off", func(c *Config) *string { return &c.Shm.Huge }),
		intSetting("AMIGO_SHM_HELP_MIN", "shared memory, smallest transfer split with the owner, bytes", func(c *Config) *int { return &c.Shm.HelpMin }),
		intSetting("AMIGO_SHM_CHUNK", "shared memory, chunk of the pipelined copy, bytes", func(c *Config) *int { return &c.Shm.Chunk }),
		intSetting("AMIGO_SHM_CHUNKS", "shared memory, chunks per pipelined copy ring", func(c *Config) *int { return &c.Shm.Chunks }),
		intSetting("AMIGO_SHM_CHUNK_RINGS", "shared memory, pipelined copy rings per rank, shared by its peers", func(c *Config) *int { return &c.Shm.ChunkRings }),
		intSetting("AMIGO_SHM_MIRROR", "shared memory, regions peers resolve alone", func(c *Config) *int { return &c.Shm.Mirror }),
		intSetting("AMIGO_SHM_PIECE", "shared memory, bytes one Advance moves per transfer", func(c *Config) *int { return &c.Shm.Piece }),
		intSetting("AMIGO_SHM_RING_SLOTS", "shared memory, 64-byte slots per descriptor buffer (0: by the ranks on the host)", func(c *Config) *int { return &c.Shm.RingSlots }),
	)
	resolvers = append(resolvers, resolveShm)
}

// resolveShm applies the defaults of ShmConfig and checks it.
func resolveShm(c *Config) error {
	s := &c.Shm
	if s.RDMA == "" {
		s.RDMA = "auto"
	}
	if s.CMA == "" {
		s.CMA = "auto"
	}
	if s.Help == "" {
		s.Help = "on"
	}
	if s.Huge == "" {
		s.Huge = "on"
	}
	if s.Keep == "" {
		s.Keep = "auto"
	}
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&s.HelpMin, shm.DefaultHelpMin)
	def(&s.Chunk, shm.DefaultChunk)
	def(&s.Chunks, shm.DefaultChunks)
	def(&s.ChunkRings, shm.DefaultRings)
	def(&s.Mirror, shm.DefaultMirror)
	def(&s.Piece, shm.DefaultPiece)
	if s.Help != "on" && s.Help != "off" {
		return fmt.Errorf("amigo: Shm.Help %q: want on or off", s.Help)
	}
	if s.Huge != "on" && s.Huge != "off" {
		return fmt.Errorf("amigo: Shm.Huge %q: want on or off", s.Huge)
	}
	if s.Keep != "auto" && s.Keep != "on" && s.Keep != "off" {
		return fmt.Errorf("amigo: Shm.Keep %q: want auto, on or off", s.Keep)
	}
	_, err := shmOptions(c).Validate()
	if err != nil {
		return fmt.Errorf("amigo: %w", err)
	}
	return nil
}

// shmRingSlots is the slots of the shm adapter's descriptor buffers that
// c sets, 0 to leave them to the adapter.
func shmRingSlots(c *Config) int {
	switch {
	case c.Shm.RingSlots != 0:
		return max(c.Shm.RingSlots, c.RingSlots)
	case !c.ringAuto:
		return c.RingSlots
	}
	return 0
}

func shmOptions(c *Config) shm.Options {
	return shm.Options{
		Contexts:     c.Contexts,
		RingSlots:    shmRingSlots(c),
		MinRingSlots: c.RingSlots,
		RDMASlots:    c.RDMASlots,
		Way:          shm.Way(c.Shm.RDMA),
		CMA:          c.Shm.CMA,
		HelpOff:      c.Shm.Help == "off",
		HugeOff:      c.Shm.Huge == "off",
		Keep:         c.Shm.Keep,
		HelpMin:      c.Shm.HelpMin,
		Chunk:        c.Shm.Chunk,
		Chunks:       c.Shm.Chunks,
		ChunkRings:   c.Shm.ChunkRings,
		Mirror:       c.Shm.Mirror,
		Piece:        c.Shm.Piece,
	}
}

// openShm makes this rank's shared-memory adapter when other ranks of the
// job run on its host.
func openShm(ctx context.Context, job transport.Bootstrap, regions *transport.Regions, cfg *Config) (transport.Adapter, error) {
	a, err := shm.New(job, regions, shmOptions(cfg))
	if err != nil || a == nil {
		return nil, err
	}
	return a, nil
}
