package amigo

import (
	"sync"
)

// Driver is a goroutine that owns a context and advances it, for programs
// that never want to call Advance themselves. While a driver runs, the
// context's callbacks run on the driver's goroutine, other goroutines post
// instructions as usual, and no one else may call Advance or Wait; code that
// must run on the owning goroutine is posted with Context.Do.
type Driver struct {
	c    *Context
	stop chan struct{}
	wg   sync.WaitGroup
}

// Drive starts a driver for c.
func (c *Context) Drive() *Driver {
	d := &Driver{c: c, stop: make(chan struct{})}
	d.wg.Add(1)
	go d.run()
	return d
}

func (d *Driver) run() {
	defer d.wg.Done()
	c := d.c
	c.enter()
	defer c.leave()
	idle := 0
	for i := 0; ; i++ {
		if i&63 == 0 {
			select {
			case <-d.stop:
				return
			default:
			}
		}
		if c.closed.Load() {
			return
		}
		if c.advance() > 0 {
			idle = 0
			continue
		}
		idle = c.idle(idle, d.stop)
	}
}

// Stop stops the driver and waits until its goroutine has left the context.
// Operations in flight stay in flight; the context can be advanced again by
// whoever owns it next.
func (d *Driver) Stop() {
	select {
	case <-d.stop:
	default:
		close(d.stop)
	}
	d.wg.Wait()
}
