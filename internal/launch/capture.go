package launch

import (
	"bytes"
	"io"
	"sync"
)

// Capture keeps what the ranks of a job write, in memory: each rank's
// output apart, and everything in the order it was written. Use its Output
// method as Options.Output; it is safe while the ranks run.
type Capture struct {
	mu   sync.Mutex
	all  bytes.Buffer
	rank []bytes.Buffer
}

// NewCapture returns a Capture for n ranks.
func NewCapture(n int) *Capture { return &Capture{rank: make([]bytes.Buffer, n)} }

// Output returns rank r's standard output and error, one writer for both.
func (c *Capture) Output(r int) (stdout, stderr io.Writer) {
	w := captureWriter{c, r}
	return w, w
}

// Rank returns what rank r wrote.
func (c *Capture) Rank(r int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rank[r].String()
}

// All returns what every rank wrote, interleaved as it was written.
func (c *Capture) All() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.all.String()
}

type captureWriter struct {
	c *Capture
	r int
}

func (w captureWriter) Write(p []byte) (int, error) {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	w.c.rank[w.r].Write(p)
	return w.c.all.Write(p)
}
