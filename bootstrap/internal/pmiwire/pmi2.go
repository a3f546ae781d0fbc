package pmiwire

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
)

// HeaderLen is the size of the length field in front of every PMI-2 message.
const HeaderLen = 6

// ErrShort is returned by ParseFrame when b holds only part of a frame.
var ErrShort = errors.New("pmi2 frame incomplete")

// ParseHeader decodes the 6-character length field of a PMI-2 frame. The
// digits may be padded with spaces on the left (Hydra), on the right
// (Slurm) or both; leading zeros are accepted. The length must be between 1
// and MaxMessage.
func ParseHeader(h []byte) (int, error) {
	if len(h) != HeaderLen {
		return 0, malformed("pmi2 header %s is not %d bytes", quote(h), HeaderLen)
	}
	d := bytes.Trim(h, " ")
	if len(d) == 0 {
		return 0, malformed("pmi2 header %s holds no length", quote(h))
	}
	n := 0
	for _, c := range d {
		if c < '0' || c > '9' {
			return 0, malformed("pmi2 header %s is not a padded decimal length", quote(h))
		}
		n = n*10 + int(c-'0')
	}
	if n == 0 || n > MaxMessage {
		return 0, malformed("pmi2 frame length %d out of range 1..%d", n, MaxMessage)
	}
	return n, nil
}

// ParseBody decodes the body of a PMI-2 frame: cmd=NAME;key=value;...; with
// the final ';' optional. A value runs from the first '=' of its field to the
// next ';'; values cannot contain ';' (Slurm has no escape for it), so an
// empty field (";;") is an error rather than an escaped semicolon.
func ParseBody(b []byte) (Msg, error) {
	if len(b) > MaxMessage {
		return Msg{}, malformed("pmi2 body of %d bytes exceeds %d", len(b), MaxMessage)
	}
	b = bytes.TrimSuffix(b, []byte{';'})
	if len(b) == 0 {
		return Msg{}, malformed("empty pmi2 body")
	}
	var m Msg
	first := true
	for len(b) > 0 || first {
		j := bytes.IndexByte(b, ';')
		if j < 0 {
			j = len(b)
		}
		field := b[:j]
		if j < len(b) {
			b = b[j+1:]
			if len(b) == 0 {
				// "...;;" at the end: an empty last field.
				return Msg{}, malformed("pmi2 body has an empty field")
			}
		} else {
			b = b[j:]
		}
		eq := bytes.IndexByte(field, '=')
		if eq <= 0 {
			return Msg{}, malformed("pmi2 field %s is not key=value", quote(field))
		}
		k, v := string(field[:eq]), string(field[eq+1:])
		if bytes.IndexByte(field, 0) >= 0 {
			return Msg{}, malformed("pmi2 field %s contains NUL", quote(field))
		}
		if first {
			if k != "cmd" || v == "" {
				return Msg{}, malformed("pmi2 body starts with %s, not cmd=NAME", quote(field))
			}
			m.Cmd = v
			first = false
			continue
		}
		m.Args = append(m.Args, KV{k, v})
	}
	return m, nil
}

// ParseFrame decodes one PMI-2 frame from the front of b and returns it with
// the number of bytes it used. If b holds only part of a frame it returns
// ErrShort and n == 0.
func ParseFrame(b []byte) (m Msg, n int, err error) {
	if len(b) < HeaderLen {
		return Msg{}, 0, ErrShort
	}
	l, err := ParseHeader(b[:HeaderLen])
	if err != nil {
		return Msg{}, 0, err
	}
	if len(b) < HeaderLen+l {
		return Msg{}, 0, ErrShort
	}
	m, err = ParseBody(b[HeaderLen : HeaderLen+l])
	if err != nil {
		return Msg{}, 0, err
	}
	return m, HeaderLen + l, nil
}

// Justify says how AppendFrame pads the length field.
type Justify int

const (
	// Right pads on the left: "    38" (Hydra, MPICH's client).
	Right Justify = iota
	// Left pads on the right: "38    " (Slurm).
	Left
)

// AppendFrame appends m as one PMI-2 frame. Keys must be non-empty and
// contain no '=' or ';'; values contain no ';'; neither contains NUL or a
// newline.
func AppendFrame(dst []byte, m Msg, j Justify) ([]byte, error) {
	start := len(dst)
	dst = append(dst, "      "...)
	if err := checkToken2(m.Cmd, true); err != nil {
		return dst[:start], malformed("pmi2 cmd %q: %v", m.Cmd, err)
	}
	dst = append(dst, "cmd="...)
	dst = append(dst, m.Cmd...)
	dst = append(dst, ';')
	for _, kv := range m.Args {
		if err := checkToken2(kv.Key, true); err != nil {
			return dst[:start], malformed("pmi2 key %q: %v", kv.Key, err)
		}
		if err := checkToken2(kv.Value, false); err != nil {
			return dst[:start], malformed("pmi2 value of %q: %v", kv.Key, err)
		}
		dst = append(dst, kv.Key...)
		dst = append(dst, '=')
		dst = append(dst, kv.Value...)
		dst = append(dst, ';')
	}
	n := len(dst) - start - HeaderLen
	if n > MaxMessage {
		return dst[:start], malformed("pmi2 frame of %d bytes exceeds %d", n, MaxMessage)
	}
	digits := strconv.Itoa(n)
	if j == Left {
		copy(dst[start:], digits)
	} else {
		copy(dst[start+HeaderLen-len(digits):], digits)
	}
	return dst, nil
}

func checkToken2(s string, key bool) error {
	if key && s == "" {
		return errEmpty
	}
	bad := ";\n\r\x00"
	if key {
		bad += "="
	}
	if strings.ContainsAny(s, bad) {
		return errBadChar
	}
	return nil
}
