package amigo

import (
	"errors"
	"log/slog"
	"os"
	"strings"
	"time"
)

// LogEnv names the variable that turns on amigo's log: AMIGO_LOG=info logs
// a rank's set-up (its adapters, the metrics address) and peer failures,
// AMIGO_LOG=debug also every connection to a peer with the adapter that
// carries it. Records go to standard error through log/slog's text
// handler, with the rank and the peer as attributes. Unset (or "off"),
// nothing is logged and the calls cost a nil check.
const LogEnv = "AMIGO_LOG"

// logger is the log, nil when off. It is set once, before any client.
var logger = newLogger(os.Getenv(LogEnv))

func newLogger(level string) *slog.Logger {
	var l slog.Level
	switch strings.ToLower(level) {
	case "", "off", "0":
		return nil
	case "debug":
		l = slog.LevelDebug
	case "warn":
		l = slog.LevelWarn
	case "error":
		l = slog.LevelError
	default: // info, 1, anything else that asks for a log
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})).With("lib", "amigo", "pid", os.Getpid())
}

// SetLogger replaces amigo's log (nil: off), for programs that route it
// into their own. Call it before opening clients.
func SetLogger(l *slog.Logger) { logger = l }

func logInfo(msg string, args ...any) {
	if logger != nil {
		logger.Info(msg, args...)
	}
}

func logWarn(msg string, args ...any) {
	if logger != nil {
		logger.Warn(msg, args...)
	}
}

// logClient logs a new client: its rank, the job's size, its adapters and
// how many peers each reaches.
func logClient(c *Client) {
	if logger == nil {
		return
	}
	by := map[string]int{}
	for r := 0; r < c.size; r++ {
		if r != c.rank {
			by[c.adapters[c.route[r]].Name()]++
		}
	}
	args := []any{"rank", c.rank, "size", c.size, "contexts", len(c.contexts)}
	for _, a := range c.adapters {
		args = append(args, slog.Int("peers_"+a.Name(), by[a.Name()]))
	}
	logger.Info("client open", args...)
}

// logConnect logs a context's first link to a peer (debug), or its failure
// to make one (warn).
func (c *Context) logConnect(p *peer) {
	if logger == nil {
		return
	}
	adapter := c.client.adapters[c.client.route[p.ep.Rank]].Name()
	attrs := []any{"rank", c.client.rank, "context", c.index, "peer", p.ep.Rank, "peer_context", p.ep.Context, "adapter", adapter}
	if p.failed != nil {
		logger.Warn("connect failed", append(attrs, "err", p.failed)...)
		return
	}
	logger.Debug("connected", attrs...)
}

// peerFailed counts a peer's failure and logs it; closing the context,
// which fails every peer, is none. A peer that closed in order (it said
// goodbye: ErrClosed) is logged at debug level, since a job that ends
// closes its ranks one after another.
func (c *Context) peerFailed(p *peer, err error) {
	if c.closed.Load() {
		return
	}
	goodbye := errors.Is(err, ErrClosed)
	if goodbye {
		c.stats.PeerGoodbyes++
	} else {
		c.stats.PeerFailures++
	}
	if logger == nil {
		return
	}
	attrs := []any{"rank", c.client.rank, "context", c.index, "peer", p.ep.Rank, "peer_context", p.ep.Context, "err", err}
	if goodbye {
		logger.Debug("peer closed", attrs...)
		return
	}
	logger.Warn("peer failed", attrs...)
}

// sleep sleeps on the context's doorbell as idle does, adding the time to
// Stats.SleepTime. It reports whether the sleep ran to its bound.
func (c *Context) sleep(done <-chan struct{}) bool {
	t := time.Now()
	timedOut := c.bell.Sleep(done, c.timer, c.cfg.SleepMax)
	c.stats.SleepTime += time.Since(t)
	return timedOut
}
