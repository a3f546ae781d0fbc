package amigo

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/amigo-hpc/amigo/transport"
	"github.com/amigo-hpc/amigo/transport/tcp"
)

// TCPConfig tunes the TCP adapter, which carries traffic between ranks on
// different hosts (and between all ranks with AMIGO_TRANSPORT=tcp). Every
// field is overridden by the AMIGO_TCP_* variable named in its comment.
//
// Connections are made on first use and authenticated by a challenge-response
// keyed by the job's secret (the launcher's AMIGO_JOB_SECRET); a peer that
// breaks its connection, dies or stays silent longer than Timeout fails every
// operation in flight with it, with an error naming it.
type TCPConfig struct {
	// Addr is the host or host:port to listen on, and to publish unless
	// Advertise is set (AMIGO_TCP_ADDR). Empty: the address of the interface that routes to
	// the launcher, or 127.0.0.1 when all ranks share this host, or the
	// first address of an interface that is up.
	Addr string
	// Advertise, if set, is published to the peers instead of the address
	// the adapter listens on (AMIGO_TCP_ADVERTISE): "host:port", or a host
	// alone, published with the listening port. Set it when peers reach
	// this rank through something that forwards to its listener (a NAT or
	// container port mapping, a tunnel, a fault-injecting proxy); the
	// handshake still authenticates the rank behind the address.
	Advertise string
	// Timeout bounds connection set-up and how long a peer may stay silent
	// before it counts as dead; idle connections carry a ping every
	// Timeout/4 (AMIGO_TCP_TIMEOUT, default 10s).
	Timeout time.Duration
	// Handoff is how long a context may go without advancing before the
	// adapter's goroutines take its sockets over, serving GET and PUT while
	// the program computes (AMIGO_TCP_HANDOFF, default 1ms).
	Handoff time.Duration
	// ReadSpin is how long such a goroutine polls a quiet socket before it
	// parks on the network poller (AMIGO_TCP_READ_SPIN, default 20µs;
	// negative: park at once).
	ReadSpin time.Duration
	// SocketBuffer sets SO_SNDBUF and SO_RCVBUF in bytes; 0 leaves the
	// kernel's autotuning (AMIGO_TCP_SOCKBUF, default 0).
	SocketBuffer int
	// RingSlots is the number of 64-byte slots of each TCP link's
	// descriptor buffer (AMIGO_TCP_RING_SLOTS, default Config.RingSlots,
	// never fewer). A packet's slots are given back only once the target
	// acknowledged it, so the buffer bounds what a stream of packets has in
	// flight: a larger one speeds up messages of tens of KiB (measured here:
	// 4096 slots, 64 KiB messages about 1.3x) and slows down those of MiBs,
	// whose eager start it lengthens (1 MiB about 0.9x). The target keeps a
	// reception ring of twice that per link.
	RingSlots int
	// RDMAPiece is the largest GET or PUT piece on a TCP link
	// (AMIGO_TCP_RDMA_PIECE, default 512 KiB; Config.RDMAChunk applies if
	// smaller).
	RDMAPiece int
}

// tcpInline is TCP's choice of Config.InlineMax (processAdapter.inline): a
// message of 16 KiB with a header of up to 512 bytes, as shared memory's
// smaller choice, a quarter of a link's descriptor buffer of 1024 slots.
// Against the default of 8192 bytes (header included, so that package
// mpi's 8 KiB messages, 16 bytes of header on top, were announced and
// streamed), two ranks over loopback, interleaved rounds: mpi_latency 8
// KiB 0.62x the time (7.6 -> 4.7 us), 16 KiB 0.64x; amibench's latency
// at 16 KiB 0.89x; bw 0.97-1.08x from 4 to 32 KiB.
const tcpInline = 16<<10 + 512

func init() {
	registerProcessAdapter(processAdapter{name: "tcp", prefer: 20, inline: tcpInline, open: openTCP})
	dur := func(name, doc string, f func(*Config) *time.Duration) setting {
		return setting{
			name: name, doc: doc,
			get: func(c *Config) string { return f(c).String() },
			set: func(c *Config, v string) error {
				d, err := time.ParseDuration(strings.TrimSpace(v))
				if err != nil {
					return err
				}
				*f(c) = d
				return nil
			},
		}
	}
	settings = append(settings,
		setting{
			name: "AMIGO_TCP_ADDR", doc: "TCP, host[:port] to listen on and publish (empty: chosen)",
			get: func(c *Config) string { return c.TCP.Addr },
			set: func(c *Config, v string) error { c.TCP.Addr = strings.TrimSpace(v); return nil },
		},
		setting{
			name: "AMIGO_TCP_ADVERTISE", doc: "TCP, host[:port] published instead of the listening address (empty: the listening address)",
			get: func(c *Config) string { return c.TCP.Advertise },
			set: func(c *Config, v string) error { c.TCP.Advertise = strings.TrimSpace(v); return nil },
		},
		dur("AMIGO_TCP_TIMEOUT", "TCP, silence after which a peer is dead", func(c *Config) *time.Duration { return &c.TCP.Timeout }),
		dur("AMIGO_TCP_HANDOFF", "TCP, time without advancing before the adapter's goroutines take the sockets", func(c *Config) *time.Duration { return &c.TCP.Handoff }),
		dur("AMIGO_TCP_READ_SPIN", "TCP, polling of a quiet socket before parking", func(c *Config) *time.Duration { return &c.TCP.ReadSpin }),
		intSetting("AMIGO_TCP_SOCKBUF", "TCP, SO_SNDBUF and SO_RCVBUF bytes (0: autotuning)", func(c *Config) *int { return &c.TCP.SocketBuffer }),
		intSetting("AMIGO_TCP_RING_SLOTS", "TCP, 64-byte slots of a link's descriptor buffer", func(c *Config) *int { return &c.TCP.RingSlots }),
		intSetting("AMIGO_TCP_RDMA_PIECE", "TCP, largest GET or PUT piece, bytes", func(c *Config) *int { return &c.TCP.RDMAPiece }),
	)
	resolvers = append(resolvers, resolveTCP)
}

// resolveTCP applies the defaults of TCPConfig and checks it.
func resolveTCP(c *Config) error {
	c.TCP.RingSlots = max(c.TCP.RingSlots, c.RingSlots)
	o, err := tcpOptions(c).Validate()
	if err != nil {
		return fmt.Errorf("amigo: %w", err)
	}
	c.TCP.Timeout, c.TCP.Handoff, c.TCP.ReadSpin, c.TCP.RDMAPiece = o.Timeout, o.Handoff, o.ReadSpin, o.RDMAPiece
	return nil
}

func tcpOptions(c *Config) tcp.Options {
	return tcp.Options{
		Addr:         c.TCP.Addr,
		Advertise:    c.TCP.Advertise,
		RingSlots:    c.TCP.RingSlots,
		RDMASlots:    c.RDMASlots,
		Timeout:      c.TCP.Timeout,
		Handoff:      c.TCP.Handoff,
		ReadSpin:     c.TCP.ReadSpin,
		SocketBuffer: c.TCP.SocketBuffer,
		RDMAPiece:    c.TCP.RDMAPiece,
	}
}

// openTCP makes this rank's TCP adapter and publishes its address; a job of
// one rank needs none.
func openTCP(ctx context.Context, job transport.Bootstrap, regions *transport.Regions, cfg *Config) (transport.Adapter, error) {
	if job.Size() < 2 {
		return nil, nil
	}
	return tcp.New(job, regions, tcpOptions(cfg))
}
