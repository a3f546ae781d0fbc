package pmiwire

import (
	"bytes"
	"strings"
)

// ParseLine decodes one PMI-1 message. line may end with '\n' (and a '\r'
// before it); it must not contain another newline. Pairs are separated by one
// or more spaces or tabs; the first pair must be cmd=NAME with a non-empty
// NAME; a value runs from the first '=' of its token to the next blank, so it
// may itself contain '='. A token without '=' or with an empty key is an
// error.
func ParseLine(line []byte) (Msg, error) {
	if len(line) > MaxMessage {
		return Msg{}, malformed("pmi1 line of %d bytes exceeds %d", len(line), MaxMessage)
	}
	line = bytes.TrimSuffix(line, []byte{'\n'})
	line = bytes.TrimSuffix(line, []byte{'\r'})
	if i := bytes.IndexAny(line, "\n\x00"); i >= 0 {
		return Msg{}, malformed("pmi1 line %s contains a newline or NUL", quote(line))
	}
	var m Msg
	first := true
	for len(line) > 0 {
		// Skip blanks.
		i := 0
		for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
			i++
		}
		line = line[i:]
		if len(line) == 0 {
			break
		}
		j := bytes.IndexAny(line, " \t")
		if j < 0 {
			j = len(line)
		}
		tok := line[:j]
		line = line[j:]
		eq := bytes.IndexByte(tok, '=')
		if eq <= 0 {
			return Msg{}, malformed("pmi1 token %s is not key=value", quote(tok))
		}
		k, v := string(tok[:eq]), string(tok[eq+1:])
		if first {
			if k != "cmd" && k != "mcmd" {
				return Msg{}, malformed("pmi1 line starts with %s, not cmd=", quote(tok))
			}
			if v == "" {
				return Msg{}, malformed("pmi1 line has an empty cmd")
			}
			m.Cmd = v
			first = false
			continue
		}
		m.Args = append(m.Args, KV{k, v})
	}
	if first {
		return Msg{}, malformed("empty pmi1 line")
	}
	return m, nil
}

// AppendLine appends m as one PMI-1 line, '\n' included. Keys must be
// non-empty and, like values, contain no blank, newline or NUL; keys
// (and cmd) contain no '='.
func AppendLine(dst []byte, m Msg) ([]byte, error) {
	if err := checkToken1(m.Cmd, true); err != nil {
		return dst, malformed("pmi1 cmd %q: %v", m.Cmd, err)
	}
	dst = append(dst, "cmd="...)
	dst = append(dst, m.Cmd...)
	for _, kv := range m.Args {
		if err := checkToken1(kv.Key, true); err != nil {
			return dst, malformed("pmi1 key %q: %v", kv.Key, err)
		}
		if err := checkToken1(kv.Value, false); err != nil {
			return dst, malformed("pmi1 value of %q: %v", kv.Key, err)
		}
		dst = append(dst, ' ')
		dst = append(dst, kv.Key...)
		dst = append(dst, '=')
		dst = append(dst, kv.Value...)
	}
	dst = append(dst, '\n')
	if len(dst) > MaxMessage {
		return dst, malformed("pmi1 line of %d bytes exceeds %d", len(dst), MaxMessage)
	}
	return dst, nil
}

func checkToken1(s string, key bool) error {
	if key && s == "" {
		return errEmpty
	}
	bad := " \t\n\r\x00"
	if key {
		bad += "="
	}
	if strings.ContainsAny(s, bad) {
		return errBadChar
	}
	return nil
}

var (
	errEmpty   = stringError("empty")
	errBadChar = stringError("contains a character the format cannot carry")
)

type stringError string

func (e stringError) Error() string { return string(e) }
