package amigo

import (
	"expvar"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// MetricsAddrEnv names the variable that makes a process serve its ranks'
// counters over HTTP: AMIGO_METRICS_ADDR=host:port serves them at
// /metrics in the Prometheus text format and at /debug/vars as expvar's
// JSON. A process listens at port plus the rank of its first client, so
// that the ranks of one host, which share the variable, do not collide
// (rank 0 at port, rank 1 at port+1, ...); port 0 picks a free port.
// MetricsAddr says where a process listens.
//
// Without it the counters are still published through the standard
// expvar package as "amigo", for programs that serve expvar themselves.
//
// The counters are each context's Stats. A context's owner is the only
// goroutine that may read them, so a scrape posts a read to every context
// (Context.Do) and waits for it at most metricsWait: a context its owner
// is not advancing answers with the figures of its last read, and
// amigo_stats_age_seconds says how old they are. Nothing is counted or
// copied for metrics between scrapes: with no scrape, they cost nothing.
const MetricsAddrEnv = "AMIGO_METRICS_ADDR"

// metricsWait bounds how long a scrape waits for the contexts' owners.
const metricsWait = 500 * time.Millisecond

// metrics is the process's registry of live clients.
var metrics struct {
	once    sync.Once
	mu      sync.Mutex
	clients []*clientMetrics
	addr    string // where the HTTP server listens
}

// clientMetrics holds the last read of each context of a client.
type clientMetrics struct {
	c   *Client
	ctx []*ctxSnapshot
}

// ctxSnapshot is the last read of one context's counters.
type ctxSnapshot struct {
	pending    atomic.Bool // a read is posted and not yet run
	mu         sync.Mutex
	stats      Stats
	unexpected int       // eager bytes held right now
	taken      time.Time // zero until the first read
}

// registerClient adds c to the counters the process publishes, starting the
// publication with the first client.
func registerClient(c *Client) {
	metrics.once.Do(func() { startMetrics(c.rank) })
	m := &clientMetrics{c: c}
	for range c.contexts {
		m.ctx = append(m.ctx, &ctxSnapshot{})
	}
	metrics.mu.Lock()
	metrics.clients = append(metrics.clients, m)
	metrics.mu.Unlock()
	logClient(c)
	startTrace(c)
}

// unregisterClient removes c, closing.
func unregisterClient(c *Client) {
	metrics.mu.Lock()
	metrics.clients = slices.DeleteFunc(metrics.clients, func(m *clientMetrics) bool { return m.c == c })
	metrics.mu.Unlock()
	stopTrace()
}

// MetricsAddr returns the address this process serves its counters at
// (AMIGO_METRICS_ADDR), or "" if it serves none.
func MetricsAddr() string {
	metrics.mu.Lock()
	defer metrics.mu.Unlock()
	return metrics.addr
}

// startMetrics publishes the "amigo" expvar and, with AMIGO_METRICS_ADDR,
// starts the HTTP server. A bad address or a port in use is reported on
// standard error (and in the log) but does not stop the job.
func startMetrics(rank int) {
	if expvar.Get("amigo") == nil {
		expvar.Publish("amigo", expvar.Func(func() any { return expvarValue() }))
	}
	addr := os.Getenv(MetricsAddrEnv)
	if addr == "" {
		return
	}
	l, err := listenMetrics(addr, rank)
	if err != nil {
		fmt.Fprintf(os.Stderr, "amigo: %s=%s: %v; serving no metrics\n", MetricsAddrEnv, addr, err)
		logWarn("metrics not served", "addr", addr, "err", err)
		return
	}
	metrics.mu.Lock()
	metrics.addr = l.Addr().String()
	metrics.mu.Unlock()
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		writePrometheus(w, snapshot(metricsWait))
	})
	mux.Handle("/debug/vars", expvar.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(l)
	logInfo("serving metrics", "addr", l.Addr().String())
}

// listenMetrics listens at addr's port plus rank (port 0: any port).
func listenMetrics(addr string, rank int) (net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("want host:port: %w", err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return nil, fmt.Errorf("port %q: want 0 to 65535", port)
	}
	if p != 0 {
		p += rank
		if p > 65535 {
			return nil, fmt.Errorf("port %s plus rank %d is past 65535", port, rank)
		}
	}
	return net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
}

// clientSnapshot is what a scrape reports of one client.
type clientSnapshot struct {
	rank, size int
	adapters   map[string]int // ranks reached by each adapter
	ctx        []ctxReading
}

type ctxReading struct {
	stats      Stats
	unexpected int
	age        time.Duration // -1: never read
}

// snapshot reads the counters of every context of every live client,
// waiting at most wait for their owners.
func snapshot(wait time.Duration) []clientSnapshot {
	metrics.mu.Lock()
	clients := slices.Clone(metrics.clients)
	metrics.mu.Unlock()
	var posted []*ctxSnapshot
	for _, m := range clients {
		for i, s := range m.ctx {
			if !s.pending.CompareAndSwap(false, true) {
				posted = append(posted, s) // a read is on its way already
				continue
			}
			err := m.c.contexts[i].Do(func(c *Context) {
				st, u := c.Stats(), c.unexpected
				s.mu.Lock()
				s.stats, s.unexpected, s.taken = st, u, time.Now()
				s.mu.Unlock()
				s.pending.Store(false)
			})
			if err != nil {
				s.pending.Store(false) // closed: keep the last read
				continue
			}
			posted = append(posted, s)
		}
	}
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if !slices.ContainsFunc(posted, func(s *ctxSnapshot) bool { return s.pending.Load() }) {
			break
		}
	}
	out := make([]clientSnapshot, 0, len(clients))
	now := time.Now()
	for _, m := range clients {
		cs := clientSnapshot{rank: m.c.rank, size: m.c.size, adapters: map[string]int{}}
		for r := 0; r < m.c.size; r++ {
			if r != m.c.rank {
				cs.adapters[m.c.adapters[m.c.route[r]].Name()]++
			}
		}
		for _, s := range m.ctx {
			s.mu.Lock()
			rd := ctxReading{stats: s.stats, unexpected: s.unexpected, age: -1}
			if !s.taken.IsZero() {
				rd.age = now.Sub(s.taken)
			}
			s.mu.Unlock()
			cs.ctx = append(cs.ctx, rd)
		}
		out = append(out, cs)
	}
	slices.SortFunc(out, func(a, b clientSnapshot) int { return a.rank - b.rank })
	return out
}

// expvarValue is the "amigo" expvar: every live client's counters, by
// context, read as for a scrape.
func expvarValue() any {
	type ctxJSON struct {
		Stats
		UnexpectedBytes int
		AgeSeconds      float64
	}
	type clientJSON struct {
		Rank, Size int
		Adapters   map[string]int
		Contexts   []ctxJSON
	}
	var out []clientJSON
	for _, cs := range snapshot(metricsWait) {
		cj := clientJSON{Rank: cs.rank, Size: cs.size, Adapters: cs.adapters}
		for _, rd := range cs.ctx {
			cj.Contexts = append(cj.Contexts, ctxJSON{rd.stats, rd.unexpected, rd.age.Seconds()})
		}
		out = append(out, cj)
	}
	return out
}

// promMetric is one metric of the Prometheus output: its samples come from
// one context's reading, each with its own extra label.
type promMetric struct {
	name, typ, help string
	label           string // the extra label's name, "" for none
	samples         func(rd *ctxReading) []promSample
}

type promSample struct {
	label string
	v     float64
}

func one(v uint64) []promSample { return []promSample{{"", float64(v)}} }

// promMetrics are the counters of a context, named after what they count,
// the way Prometheus names them.
var promMetrics = []promMetric{
	{"amigo_messages_sent_total", "counter", "Messages sent, by protocol: inline active messages, rendezvous (RTS), eager streams (SEND), multicasts started.", "protocol",
		func(rd *ctxReading) []promSample {
			s := &rd.stats
			return []promSample{{"inline", float64(s.SentInline)}, {"rendezvous", float64(s.SentRendezvous)}, {"eager", float64(s.SentEager)}, {"multicast", float64(s.MulticastsSent)}}
		}},
	{"amigo_messages_sent_at_once_total", "counter", "Inline active messages the adapter sent at once, without the descriptor buffer (a link with nothing in flight, over ofi); counted in amigo_messages_sent_total's inline too.", "",
		func(rd *ctxReading) []promSample { return one(rd.stats.SentAtOnce) }},
	{"amigo_messages_received_total", "counter", "Messages received whole, by protocol.", "protocol",
		func(rd *ctxReading) []promSample {
			s := &rd.stats
			return []promSample{{"inline", float64(s.ReceivedInline)}, {"rendezvous", float64(s.ReceivedRendezvous)}, {"eager", float64(s.ReceivedEager)}, {"multicast", float64(s.MulticastsDelivered)}}
		}},
	{"amigo_bytes_total", "counter", "Bytes moved by the large-message protocols: eager bytes streamed and kept, bytes fetched by GET after a STOP or an RTS, bytes PUT after a STOP, multicast deposits.", "kind",
		func(rd *ctxReading) []promSample {
			s := &rd.stats
			return []promSample{{"eager_sent", float64(s.EagerBytesSent)}, {"eager_kept", float64(s.EagerBytesKept)}, {"eager_dropped", float64(s.EagerBytesDropped)},
				{"fetched", float64(s.FetchedBytes)}, {"put", float64(s.PutBytes)}, {"multicast_put", float64(s.MulticastBytesPut)}}
		}},
	{"amigo_rma_operations_total", "counter", "One-sided operations started, by kind.", "op",
		func(rd *ctxReading) []promSample {
			s := &rd.stats
			return []promSample{{"put", float64(s.Puts)}, {"get", float64(s.Gets)}, {"atomic", float64(s.Atomics)}}
		}},
	{"amigo_stops_total", "counter", "Streams this receiver stopped (by a STOP packet, or by no word to a sender that waits for GO), and STOP packets this sender read.", "direction",
		func(rd *ctxReading) []promSample {
			return []promSample{{"sent", float64(rd.stats.Stops)}, {"received", float64(rd.stats.StopsReceived)}}
		}},
	{"amigo_mid_epochs_total", "counter", "Epochs of 4 MiB of a window's mid-size sends, by the way measurement chose (Config.MidWay).", "way",
		func(rd *ctxReading) []promSample {
			return []promSample{{"inline", float64(rd.stats.MidInline)}, {"announced", float64(rd.stats.MidAnnounced)}}
		}},
	{"amigo_keep_epochs_total", "counter", "Epochs of 4 MiB of inline messages of 2 KiB or more that arrived over shared memory, by how the slots of those not copied out were given back (Config.Shm.Keep).", "way",
		func(rd *ctxReading) []promSample {
			return []promSample{{"zeroed", float64(rd.stats.KeepZeroed)}, {"kept", float64(rd.stats.KeepKept)}}
		}},
	{"amigo_gos_total", "counter", "GO packets sent: streams whose sender waited for the receiver's word, let stream.", "", func(rd *ctxReading) []promSample { return one(rd.stats.Gos) }},
	{"amigo_send_keys_shared_total", "counter", "Sends by announcement that shared the registration of a send in flight from the same buffer.", "", func(rd *ctxReading) []promSample { return one(rd.stats.SendKeysShared) }},
	{"amigo_unexpected_bytes", "gauge", "Eager bytes held for messages with no buffer yet.", "", func(rd *ctxReading) []promSample { return []promSample{{"", float64(rd.unexpected)}} }},
	{"amigo_unexpected_bytes_peak", "gauge", "Most eager bytes held at once for messages with no buffer yet.", "", func(rd *ctxReading) []promSample { return []promSample{{"", float64(rd.stats.UnexpectedPeak)}} }},
	{"amigo_retries_total", "counter", "Instructions that waited for room in a full FIFO and were retried from progress.", "", func(rd *ctxReading) []promSample { return one(rd.stats.Queued) }},
	{"amigo_peer_failures_total", "counter", "Peers whose link failed (died, unreachable, broken), not counting those that closed in order.", "", func(rd *ctxReading) []promSample { return one(rd.stats.PeerFailures) }},
	{"amigo_peer_goodbyes_total", "counter", "Peers that closed in order (said goodbye).", "", func(rd *ctxReading) []promSample { return one(rd.stats.PeerGoodbyes) }},
	{"amigo_errors_total", "counter", "Errors that belong to no operation (Config.OnError).", "", func(rd *ctxReading) []promSample { return one(rd.stats.Errors) }},
	{"amigo_wait_sleeps_total", "counter", "Times a waiting goroutine slept on the context's doorbell.", "", func(rd *ctxReading) []promSample { return one(rd.stats.Sleeps) }},
	{"amigo_wait_sleep_seconds_total", "counter", "Time waiting goroutines spent asleep on the context's doorbell.", "", func(rd *ctxReading) []promSample { return []promSample{{"", rd.stats.SleepTime.Seconds()}} }},
	{"amigo_announcements_total", "counter", "Announcements (RTS) delivered to handlers, deferred and declined.", "outcome",
		func(rd *ctxReading) []promSample {
			s := &rd.stats
			return []promSample{{"delivered", float64(s.Announced)}, {"deferred", float64(s.Deferred)}, {"declined", float64(s.Declined)}}
		}},
	{"amigo_dropped_packets_total", "counter", "Packets dropped: for a dispatch id with no handler, malformed, stale acknowledgements.", "reason",
		func(rd *ctxReading) []promSample {
			s := &rd.stats
			return []promSample{{"no_dispatch", float64(s.NoDispatch)}, {"malformed", float64(s.Malformed)}, {"stale_ack", float64(s.StaleAcks)}}
		}},
	{"amigo_acks_total", "counter", "Remote-completion acknowledgements, by direction.", "direction",
		func(rd *ctxReading) []promSample {
			return []promSample{{"sent", float64(rd.stats.AcksSent)}, {"received", float64(rd.stats.AcksReceived)}}
		}},
	{"amigo_ack_packets_total", "counter", "Packets that carried the acknowledgements sent: one each, or those of receives completed together.", "", func(rd *ctxReading) []promSample { return one(rd.stats.AckPackets) }},
	{"amigo_held_for_dispatch_total", "counter", "Messages held until their handler was registered or their grace ended.", "", func(rd *ctxReading) []promSample { return one(rd.stats.HeldForDispatch) }},
	{"amigo_refused_by_peer_total", "counter", "Inline messages without an acknowledgement that a peer refused for want of a handler.", "", func(rd *ctxReading) []promSample { return one(rd.stats.RefusedByPeer) }},
	{"amigo_wait_sleep_timeouts_total", "counter", "Sleeps that ran to their bound without a ring.", "", func(rd *ctxReading) []promSample { return one(rd.stats.SleepTimeouts) }},
	{"amigo_multicast_announcements_total", "counter", "Multicast announcements received as a target.", "", func(rd *ctxReading) []promSample { return one(rd.stats.MulticastsReceived) }},
	{"amigo_multicasts_dropped_total", "counter", "Multicast requests dropped unseen because their origin had failed here.", "", func(rd *ctxReading) []promSample { return one(rd.stats.MulticastsDropped) }},
	{"amigo_stats_age_seconds", "gauge", "Age of the counters reported: how long ago the context's owner last read them for a scrape (-1: never).", "",
		func(rd *ctxReading) []promSample {
			if rd.age < 0 {
				return []promSample{{"", -1}}
			}
			return []promSample{{"", rd.age.Seconds()}}
		}},
}

// writePrometheus writes the snapshot in the Prometheus text format.
func writePrometheus(w io.Writer, snap []clientSnapshot) {
	fmt.Fprintf(w, "# HELP amigo_peers Peer ranks of a rank, by the adapter that reaches them.\n# TYPE amigo_peers gauge\n")
	for _, cs := range snap {
		names := make([]string, 0, len(cs.adapters))
		for a := range cs.adapters {
			names = append(names, a)
		}
		slices.Sort(names)
		for _, a := range names {
			fmt.Fprintf(w, "amigo_peers{rank=\"%d\",adapter=%q} %d\n", cs.rank, a, cs.adapters[a])
		}
	}
	for _, m := range promMetrics {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", m.name, m.help, m.name, m.typ)
		for _, cs := range snap {
			for i := range cs.ctx {
				for _, s := range m.samples(&cs.ctx[i]) {
					extra := ""
					if m.label != "" {
						extra = fmt.Sprintf(",%s=%q", m.label, s.label)
					}
					fmt.Fprintf(w, "%s{rank=\"%d\",context=\"%d\"%s} %s\n", m.name, cs.rank, i, extra, strconv.FormatFloat(s.v, 'g', -1, 64))
				}
			}
		}
	}
}
