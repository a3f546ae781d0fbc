package bootstrap

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/amigo-hpc/amigo/bootstrap/internal/pmiwire"
)

// deadlineConn is what both net.Conn and a pollable *os.File offer.
type deadlineConn interface {
	io.ReadWriteCloser
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
}

// wireConn is a PMI connection to the launcher. Reads go through a bounded
// buffered reader; every write is a single Write call on the connection
// (Slurm's PMI-2 server requires the init line to arrive alone), serialised
// by wmu so that Abort can write while another goroutine waits in a fence.
//
// After any read or write error the byte stream's state is unknown (a late
// reply may still arrive), so the connection is marked broken and every
// later call returns the first error.
type wireConn struct {
	c    deadlineConn
	r    *bufio.Reader
	name string // "PMI_FD=6" or "PMI_PORT=host:port", for errors

	wmu sync.Mutex

	bmu    sync.Mutex
	broken error
}

func newWireConn(c deadlineConn, name string) *wireConn {
	return &wireConn{c: c, r: bufio.NewReaderSize(c, 4096), name: name}
}

// dialFD wraps the inherited descriptor fd. net.FileConn makes deadlines
// work on the socket pair that Hydra and Slurm pass; a pollable non-socket
// (a pipe pair, say) falls back to *os.File, which also has deadlines.
func dialFD(fdStr string) (*wireConn, error) {
	fd, err := strconv.Atoi(fdStr)
	if err != nil || fd < 0 || fd > 1<<24 {
		return nil, fmt.Errorf("%w: PMI_FD=%q is not a descriptor number", ErrEnv, fdStr)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("%w: PMI_FD=%d is not open in this process: %v", ErrEnv, fd, err)
	}
	name := "PMI_FD=" + fdStr
	f := os.NewFile(uintptr(fd), name)
	if nc, err := net.FileConn(f); err == nil {
		f.Close() // FileConn holds its own duplicate
		return newWireConn(nc, name), nil
	}
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: PMI_FD=%d supports no read deadline (%v); refusing unbounded waits", ErrEnv, fd, err)
	}
	return newWireConn(f, name), nil
}

// dialPort connects to PMI_PORT (host:port).
func dialPort(ctx context.Context, addr string, timeout time.Duration) (*wireConn, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: connect to launcher at PMI_PORT=%s: %w", addr, classify(ctx, err))
	}
	return newWireConn(nc.(*net.TCPConn), "PMI_PORT="+addr), nil
}

func (w *wireConn) fail(err error) error {
	w.bmu.Lock()
	defer w.bmu.Unlock()
	if w.broken == nil {
		w.broken = err
	}
	return w.broken
}

func (w *wireConn) err() error {
	w.bmu.Lock()
	defer w.bmu.Unlock()
	return w.broken
}

// classify maps I/O errors to the package's sentinel errors.
func classify(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx != nil && ctx.Err() != nil:
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w (%v)", ErrTimeout, err)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, net.ErrClosed), errors.Is(err, os.ErrClosed):
		return fmt.Errorf("%w (%v)", ErrLauncherGone, err)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%w (%v)", ErrTimeout, err)
	}
	return err
}

// deadline is the earlier of ctx's deadline and now+d.
func deadline(ctx context.Context, d time.Duration) time.Time {
	t := time.Now().Add(d)
	if dl, ok := ctx.Deadline(); ok && dl.Before(t) {
		t = dl
	}
	return t
}

// watch makes a blocking read return when ctx is cancelled; the returned
// stop must be called when the read is over.
func (w *wireConn) watch(ctx context.Context) (stop func() bool) {
	return context.AfterFunc(ctx, func() { w.c.SetReadDeadline(time.Now()) })
}

// write sends b in one Write call.
func (w *wireConn) write(ctx context.Context, b []byte, timeout time.Duration) error {
	if err := w.err(); err != nil {
		return err
	}
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if err := w.c.SetWriteDeadline(deadline(ctx, timeout)); err != nil {
		return w.fail(fmt.Errorf("%w: %s: set write deadline: %v", ErrLauncherGone, w.name, err))
	}
	if _, err := w.c.Write(b); err != nil {
		return w.fail(fmt.Errorf("%s: write: %w", w.name, classify(ctx, err)))
	}
	return nil
}

// readLine reads one '\n'-terminated line (PMI-1, and the PMI-2 init reply).
func (w *wireConn) readLine(ctx context.Context, timeout time.Duration) ([]byte, error) {
	if err := w.err(); err != nil {
		return nil, err
	}
	if err := w.c.SetReadDeadline(deadline(ctx, timeout)); err != nil {
		return nil, w.fail(fmt.Errorf("%w: %s: set read deadline: %v", ErrLauncherGone, w.name, err))
	}
	stop := w.watch(ctx)
	defer stop()
	var line []byte
	for {
		frag, err := w.r.ReadSlice('\n')
		line = append(line, frag...)
		if err == nil {
			return line, nil
		}
		if err == bufio.ErrBufferFull {
			if len(line) > pmiwire.MaxMessage {
				return nil, w.fail(fmt.Errorf("%w: %s: reply line longer than %d bytes", ErrProtocol, w.name, pmiwire.MaxMessage))
			}
			continue
		}
		if errors.Is(err, io.EOF) && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, w.fail(fmt.Errorf("%s: read: %w", w.name, classify(ctx, err)))
	}
}

// readFrame reads one PMI-2 frame and returns its body.
func (w *wireConn) readFrame(ctx context.Context, timeout time.Duration) ([]byte, error) {
	if err := w.err(); err != nil {
		return nil, err
	}
	if err := w.c.SetReadDeadline(deadline(ctx, timeout)); err != nil {
		return nil, w.fail(fmt.Errorf("%w: %s: set read deadline: %v", ErrLauncherGone, w.name, err))
	}
	stop := w.watch(ctx)
	defer stop()
	var h [pmiwire.HeaderLen]byte
	if _, err := io.ReadFull(w.r, h[:]); err != nil {
		return nil, w.fail(fmt.Errorf("%s: read: %w", w.name, classify(ctx, err)))
	}
	n, err := pmiwire.ParseHeader(h[:])
	if err != nil {
		return nil, w.fail(fmt.Errorf("%w: %s: %w", ErrProtocol, w.name, err))
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(w.r, body); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, w.fail(fmt.Errorf("%s: read: %w", w.name, classify(ctx, err)))
	}
	return body, nil
}

func (w *wireConn) close() error {
	w.fail(fmt.Errorf("%w: %s", ErrClosed, w.name))
	return w.c.Close()
}
