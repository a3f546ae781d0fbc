package pmiwire

import (
	"strconv"
	"strings"
)

// Block is one (start node, node count, ranks per node) triple of a
// PMI_process_mapping vector: ranks are laid out NodeCount nodes at a time,
// PerNode consecutive ranks on each, starting at node Start.
type Block struct {
	Start, NodeCount, PerNode int
}

// maxMappingNode bounds node ids and counts in a mapping, so that a hostile
// value cannot make Nodes allocate or loop without bound.
const maxMappingNode = 1 << 20

// ParseProcessMapping decodes MPICH's PMI_process_mapping value, for example
// "(vector,(0,1,4))" for 4 ranks on one node, "(vector,(0,4,1))" for one rank
// on each of 4 nodes, or "(vector,(0,2,2),(2,1,3))". Blanks between tokens
// are allowed. The empty vector "(vector)" yields no blocks.
func ParseProcessMapping(s string) ([]Block, error) {
	if len(s) > MaxMessage {
		return nil, malformed("process mapping of %d bytes", len(s))
	}
	p := mapParser{s: s}
	if !p.lit("(") || !p.word("vector") {
		return nil, malformed("process mapping %q does not start with (vector", short(s))
	}
	var blocks []Block
	for {
		if p.lit(")") {
			break
		}
		if !p.lit(",") || !p.lit("(") {
			return nil, malformed("process mapping %q: expected ,( at offset %d", short(s), p.i)
		}
		var v [3]int
		for k := range v {
			if k > 0 && !p.lit(",") {
				return nil, malformed("process mapping %q: expected , at offset %d", short(s), p.i)
			}
			n, ok := p.num()
			if !ok {
				return nil, malformed("process mapping %q: expected a number at offset %d", short(s), p.i)
			}
			v[k] = n
		}
		if !p.lit(")") {
			return nil, malformed("process mapping %q: expected ) at offset %d", short(s), p.i)
		}
		if v[1] < 1 || v[2] < 1 {
			return nil, malformed("process mapping %q: block (%d,%d,%d) is empty", short(s), v[0], v[1], v[2])
		}
		if v[0]+v[1] > maxMappingNode {
			return nil, malformed("process mapping %q: node ids beyond %d", short(s), maxMappingNode)
		}
		blocks = append(blocks, Block{v[0], v[1], v[2]})
	}
	p.skip()
	if p.i != len(s) {
		return nil, malformed("process mapping %q: trailing bytes at offset %d", short(s), p.i)
	}
	return blocks, nil
}

// Nodes expands a mapping to the node id of each of size ranks. Like MPICH,
// it repeats the blocks cyclically when they describe fewer than size ranks:
// Hydra's "(vector,(0,1,1))" with 2 ranks on one host means both on node 0.
func Nodes(blocks []Block, size int) ([]int, error) {
	if size < 0 || size > maxMappingNode {
		return nil, malformed("process mapping for %d ranks", size)
	}
	if len(blocks) == 0 {
		return nil, malformed("process mapping has no blocks")
	}
	for _, b := range blocks {
		if b.NodeCount < 1 || b.PerNode < 1 || b.Start < 0 {
			return nil, malformed("process mapping block (%d,%d,%d) is empty", b.Start, b.NodeCount, b.PerNode)
		}
	}
	out := make([]int, 0, size)
	for len(out) < size {
		for _, b := range blocks {
			for n := 0; n < b.NodeCount && len(out) < size; n++ {
				for k := 0; k < b.PerNode && len(out) < size; k++ {
					out = append(out, b.Start+n)
				}
			}
		}
	}
	return out, nil
}

// FormatProcessMapping encodes the node id of each rank in the vector form,
// merging runs: nodes [0 0 1 1] give "(vector,(0,2,2))". Nodes of
// FormatProcessMapping's output, parsed, equals nodes.
func FormatProcessMapping(nodes []int) string {
	var blocks []Block
	for i := 0; i < len(nodes); {
		j := i
		for j < len(nodes) && nodes[j] == nodes[i] {
			j++
		}
		run := Block{nodes[i], 1, j - i}
		if n := len(blocks); n > 0 {
			last := &blocks[n-1]
			if last.PerNode == run.PerNode && last.Start+last.NodeCount == run.Start {
				last.NodeCount++
				i = j
				continue
			}
		}
		blocks = append(blocks, run)
		i = j
	}
	var b strings.Builder
	b.WriteString("(vector")
	for _, bl := range blocks {
		b.WriteString(",(")
		b.WriteString(strconv.Itoa(bl.Start))
		b.WriteByte(',')
		b.WriteString(strconv.Itoa(bl.NodeCount))
		b.WriteByte(',')
		b.WriteString(strconv.Itoa(bl.PerNode))
		b.WriteByte(')')
	}
	b.WriteByte(')')
	return b.String()
}

type mapParser struct {
	s string
	i int
}

func (p *mapParser) skip() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *mapParser) lit(t string) bool {
	p.skip()
	if strings.HasPrefix(p.s[p.i:], t) {
		p.i += len(t)
		return true
	}
	return false
}

func (p *mapParser) word(w string) bool { return p.lit(w) }

func (p *mapParser) num() (int, bool) {
	p.skip()
	j := p.i
	for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
		j++
	}
	if j == p.i || j-p.i > 7 {
		return 0, false
	}
	n, err := strconv.Atoi(p.s[p.i:j])
	if err != nil || n > maxMappingNode {
		return 0, false
	}
	p.i = j
	return n, true
}

func short(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
