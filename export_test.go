package amigo

// Asleep reports whether c's goroutine has armed its doorbell and entered
// its sleep n times or more: a ring now wakes a sleeping consumer (or one
// at the door of its sleep, which then returns at once).
func Asleep(c *Context, n uint64) bool { return c.bell.Armed() && c.bell.Sleeping() >= n }

// Slept returns how many times c's goroutine entered a sleep, and how many
// rings woke it (or pre-empted a sleep it had armed).
func Slept(c *Context) (sleeps, rings uint64) { return c.bell.Sleeping(), c.bell.Rings() }
