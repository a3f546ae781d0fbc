package amigo

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"time"

	"github.com/amigo-hpc/amigo/bootstrap"
)

// ErrLost reports a peer that the job's launcher lost: a job that goes on
// when ranks fail (amirun --keep-going sets AMIGO_KEEP_GOING=1 for its
// ranks) learns from the launcher which ranks it lost, and
// Context.PeerErr reports them, wrapped in a *PeerError, even where the
// adapter could not tell (a host that went silent).
var ErrLost = errors.New("lost by the launcher")

// lostPoll is how often a rank of such a job asks its launcher.
const lostPoll = 100 * time.Millisecond

// lostWatch polls the launcher for the ranks it lost.
type lostWatch struct {
	bits []atomic.Uint64 // a set bit: the rank is lost
	stop chan struct{}
	done chan struct{}
}

// watchLost starts polling job for lost ranks if the launcher lets the job
// go on when ranks fail.
func (c *Client) watchLost(job bootstrap.Job) {
	if os.Getenv("AMIGO_KEEP_GOING") != "1" || c.size < 2 {
		return
	}
	w := &lostWatch{bits: make([]atomic.Uint64, (c.size+63)/64), stop: make(chan struct{}), done: make(chan struct{})}
	c.lost = w
	go func() {
		defer close(w.done)
		t := time.NewTicker(lostPoll)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
			// Bounded by the job's request timeout, not by the poll's
			// period: a launcher that answers late (a loaded host) would
			// otherwise leave its answer on the connection after the
			// deadline, which fails the connection for good, and the
			// rank's finalize at Close with it.
			ranks, err := bootstrap.LostRanks(context.Background(), job)
			if errors.Is(err, bootstrap.ErrClosed) {
				return
			}
			for _, r := range ranks {
				w.bits[r/64].Or(1 << (r % 64))
			}
		}
	}()
}

// stopWatch ends the polling before the job is closed.
func (w *lostWatch) stopWatch() {
	close(w.stop)
	<-w.done
}

// has reports whether the launcher lost rank.
func (w *lostWatch) has(rank int) bool {
	return w.bits[rank/64].Load()&(1<<(rank%64)) != 0
}
