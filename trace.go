package amigo

import (
	"context"
	"fmt"
	"os"
	"runtime/trace"
	"sync"

	"github.com/amigo-hpc/amigo/transport"
)

// TraceEnv names the variable that annotates amigo's work for the Go
// execution tracer: with AMIGO_TRACE=1 (or a file prefix), sends, active
// message handlers, receives of announced messages, Put, Get and the
// collectives of Client are runtime/trace regions, and a send or receive
// with a completion callback is a task from its posting to its callback,
// logged with its peer and size; go tool trace then shows each rank's
// messages on the goroutines that posted and ran them.
//
// If the program is not tracing itself when its first client opens, amigo
// starts the tracer, writing to amigo-trace.<rank>.out in the working
// directory (with a prefix, to <prefix>.<rank>), and stops it when the
// process's last client closes. Unset (or "0"), nothing is annotated and
// the hooks cost one test of a boolean.
const TraceEnv = "AMIGO_TRACE"

// traceOn says whether AMIGO_TRACE asked for annotations. It is set once,
// before any client, and only read afterwards.
var traceOn = os.Getenv(TraceEnv) != "" && os.Getenv(TraceEnv) != "0"

// tracing is the tracer amigo started: its file and the clients open.
var tracing struct {
	mu      sync.Mutex
	file    *os.File
	clients int
}

// startTrace starts the tracer for the process's first client, if
// AMIGO_TRACE asks and the program does not trace already.
func startTrace(c *Client) {
	if !traceOn {
		return
	}
	tracing.mu.Lock()
	defer tracing.mu.Unlock()
	tracing.clients++
	if tracing.clients > 1 || trace.IsEnabled() {
		return
	}
	prefix := os.Getenv(TraceEnv)
	if prefix == "1" {
		prefix = "amigo-trace"
	}
	name := fmt.Sprintf("%s.%d.out", prefix, c.rank)
	if prefix != "amigo-trace" {
		name = fmt.Sprintf("%s.%d", prefix, c.rank)
	}
	f, err := os.Create(name)
	if err == nil {
		if err = trace.Start(f); err != nil {
			f.Close()
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "amigo: %s: %v; not tracing\n", TraceEnv, err)
		return
	}
	tracing.file = f
	logInfo("tracing", "rank", c.rank, "file", name)
}

// stopTrace stops the tracer amigo started once the last client closed.
func stopTrace() {
	if !traceOn {
		return
	}
	tracing.mu.Lock()
	defer tracing.mu.Unlock()
	if tracing.clients--; tracing.clients > 0 || tracing.file == nil {
		return
	}
	trace.Stop()
	tracing.file.Close()
	tracing.file = nil
}

// traceCtx is the context of amigo's regions and tasks: they belong to no
// request of the program.
var traceCtx = context.Background()

// tracedDone starts a task for an operation that completes with done, and
// returns the task's context and done wrapped to end the task.
func tracedDone(kind string, done func(error), format string, args ...any) (context.Context, func(error)) {
	ctx, task := trace.NewTask(traceCtx, kind)
	trace.Logf(ctx, "amigo", format, args...)
	return ctx, func(err error) {
		if err != nil {
			trace.Log(ctx, "amigo", "error: "+err.Error())
		}
		task.End()
		if done != nil {
			done(err)
		}
	}
}

// tracedSend is Send and SendWith under AMIGO_TRACE: a region around the
// posting, in a task that ends with the completion (when there is one).
func (c *Context) tracedSend(ep Endpoint, d Dispatch, header, data []byte, done, rdone func(error)) error {
	ctx := traceCtx
	if done != nil {
		ctx, done = tracedDone("amigo.Send", done, "to %d.%d dispatch %d, %d+%d bytes", ep.Rank, ep.Context, d, len(header), len(data))
	}
	defer trace.StartRegion(ctx, "amigo.Send").End()
	return c.send(ep, d, header, data, done, rdone)
}

// tracedRMA is Put and Get under AMIGO_TRACE.
func (c *Context) tracedRMA(k transport.RDMAKind, ep Endpoint, local []byte, remote Key, off uint64, done, rdone func(error)) error {
	name := "amigo.Get"
	if k == transport.Put {
		name = "amigo.Put"
	}
	ctx, done := tracedDone(name, done, "rank %d.%d key %d offset %d, %d bytes", ep.Rank, ep.Context, remote, off, len(local))
	defer trace.StartRegion(ctx, name).End()
	return c.rma(k, ep, local, remote, off, done, rdone)
}

// tracedImmediate is SendImmediate under AMIGO_TRACE.
func (c *Context) tracedImmediate(ep Endpoint, d Dispatch, header, data []byte) error {
	defer trace.StartRegion(traceCtx, "amigo.SendImmediate").End()
	return c.sendImmediate(ep, d, header, data)
}

// traceRegion starts a region of name (Barrier).
func traceRegion(name string) *trace.Region { return trace.StartRegion(traceCtx, name) }

// tracedHandler runs an active message's handler under AMIGO_TRACE, inside
// a region that logs the message.
func (c *Context) tracedHandler(fn Handler, m *Message) {
	r := trace.StartRegion(traceCtx, "amigo.Handler")
	trace.Logf(traceCtx, "amigo", "from %d.%d dispatch %d, %d bytes, inline %v", m.Source.Rank, m.Source.Context, m.Dispatch, m.size, m.inline)
	fn(c, m)
	r.End()
}

// tracedReceive wraps the completion of Message.Receive in a task.
func tracedReceive(m *Message, done func(error)) func(error) {
	_, done = tracedDone("amigo.Receive", done, "from %d.%d dispatch %d, %d bytes", m.Source.Rank, m.Source.Context, m.Dispatch, m.size)
	return done
}
