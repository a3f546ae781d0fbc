package amigo

import "context"

// Counter counts outstanding operations of one context and keeps the first
// error any of them reported. Its callback, Done, is made once, so passing it
// to many operations allocates nothing. A Counter belongs to the goroutine
// that owns the context its operations run on.
type Counter struct {
	n    int
	err  error
	done func(error)
}

// NewCounter returns a counter at zero.
func NewCounter() *Counter {
	k := &Counter{}
	k.done = func(err error) {
		k.n--
		if err != nil && k.err == nil {
			k.err = err
		}
	}
	return k
}

// Add adds n outstanding operations.
func (k *Counter) Add(n int) { k.n += n }

// Done returns the callback that counts one operation complete.
func (k *Counter) Done() func(error) { return k.done }

// Pending returns the number of outstanding operations.
func (k *Counter) Pending() int { return k.n }

// Err returns the first error reported, and clears it.
func (k *Counter) Err() error {
	err := k.err
	k.err = nil
	return err
}

// WaitCounter advances c until k has no outstanding operations, then returns
// the first error they reported.
func (c *Context) WaitCounter(ctx context.Context, k *Counter) error {
	if err := c.Wait(ctx, k.zero); err != nil {
		return err
	}
	return k.Err()
}

func (k *Counter) zero() bool { return k.n <= 0 }
