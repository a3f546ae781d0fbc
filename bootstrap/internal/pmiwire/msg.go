// Package pmiwire encodes and decodes the two wire formats of the Process
// Management Interface that MPICH's Hydra and Slurm speak to the processes
// they start:
//
//   - PMI-1 ("simple PMI"): one message per line, space-separated
//     key=value pairs, the first of which is cmd=..., ended by '\n'.
//   - PMI-2: a 6-character decimal length (padded with spaces on either
//     side: Hydra right-justifies it, Slurm left-justifies it) followed by
//     that many bytes of cmd=...;key=value;...;
//
// Both start with the same PMI-1 style init line, which is how a server
// tells them apart.
//
// The package also parses PMI_process_mapping and encodes binary values so
// that they survive both formats. It does no I/O; every decoder is fuzzed.
package pmiwire

import (
	"errors"
	"fmt"
	"strings"
)

// ErrMalformed is wrapped by every decoding error of this package.
var ErrMalformed = errors.New("malformed PMI message")

// MaxMessage bounds the size of one decoded message in either format. Real
// launchers keep messages near 1 KiB; anything much larger is an error, not a
// reason to allocate.
const MaxMessage = 64 << 10

// KV is one key=value pair of a message.
type KV struct {
	Key, Value string
}

// Msg is one PMI message of either format: the value of cmd= and the other
// pairs in the order they appeared.
type Msg struct {
	Cmd  string
	Args []KV
}

// Get returns the value of the first pair named key.
func (m Msg) Get(key string) (string, bool) {
	for _, kv := range m.Args {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return "", false
}

// String renders m for error messages, in PMI-1 form, shortened if long.
func (m Msg) String() string {
	var b strings.Builder
	b.WriteString("cmd=")
	b.WriteString(m.Cmd)
	for _, kv := range m.Args {
		b.WriteByte(' ')
		b.WriteString(kv.Key)
		b.WriteByte('=')
		b.WriteString(kv.Value)
	}
	s := b.String()
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// quote shortens and quotes untrusted bytes for an error message.
func quote(b []byte) string {
	if len(b) > 80 {
		return fmt.Sprintf("%q...", b[:80])
	}
	return fmt.Sprintf("%q", b)
}
