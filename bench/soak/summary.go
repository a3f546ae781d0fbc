package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// row sums the rounds of one scenario.
type row struct {
	rounds, faults, skipped           int
	killedIn                          map[string]int
	issued, ok, failed, hangs         uint64
	delivered, bytes                  uint64
	checksum, dups, outOfOrder, lost  uint64
	errVictim, errByVictim, errOther  uint64
	errUnnamed                        uint64
	byeMissing, leaks, exits, missing int
	byeAckErrors                      int
	unclean                           int
	peakUnexpected, held              int
	samples                           []string
}

// summary is the soak's outcome.
type summary struct {
	o                         options
	rows                      map[string]*row
	order                     []string
	rounds                    []*roundResult
	elapsed                   time.Duration
	shmLeft                   int
	driverBefore, driverAfter [2]int
	// Per rank, over every round: the largest before and after values.
	gBefore, gAfter, fBefore, fAfter int
	heapBefore, heapAfter            uint64
	rssBefore, rssAfter              uint64
	tails                            []string
}

func newSummary(o options) *summary { return &summary{o: o, rows: map[string]*row{}} }

func (s *summary) add(rr *roundResult) {
	key := rr.sc.String()
	w := s.rows[key]
	if w == nil {
		w = &row{killedIn: map[string]int{}}
		s.rows[key] = w
		s.order = append(s.order, key)
	}
	s.rounds = append(s.rounds, rr)
	w.rounds++
	w.faults += rr.faults
	if rr.skipped {
		w.skipped++
	}
	if rr.killedIn != "" {
		w.killedIn[rr.killedIn]++
	}
	w.exits += len(rr.exits)
	w.missing += len(rr.missing)
	if !rr.clean() {
		w.unclean++
		if len(s.tails) < 6 {
			s.tails = append(s.tails, fmt.Sprintf("round %v (victim %d): %s\n%s", rr.sc, rr.victim, rr.brief(), strings.Join(rr.tails, "\n")))
		}
	}
	for r, res := range rr.results {
		if res == nil {
			continue
		}
		for _, k := range res.Kinds {
			w.issued += k.Issued
			w.ok += k.OK
			w.failed += k.Failed
		}
		w.hangs += res.Hangs
		w.bytes += res.DeliveredBytes + res.Kinds[kGet].Bytes
		w.checksum += res.ChecksumFailures
		w.dups += res.Duplicates
		w.outOfOrder += res.OutOfOrder
		w.lost += rr.lost(r)
		for p, e := range res.ErrNamed {
			switch {
			case r == rr.victim:
				w.errByVictim += e
			case p == rr.victim:
				w.errVictim += e
			default:
				w.errOther += e
			}
		}
		w.errUnnamed += res.ErrUnnamed
		for _, d := range res.Delivered {
			w.delivered += d
		}
		w.byeMissing += len(res.ByeMissing)
		w.byeAckErrors += res.ByeAckErrors
		if rr.leaked(r) {
			w.leaks++
		}
		w.peakUnexpected = max(w.peakUnexpected, res.UnexpectedPeak)
		w.held += res.Held
		for _, x := range res.ErrSamples {
			if len(w.samples) < 6 && !slices.Contains(w.samples, x) {
				w.samples = append(w.samples, x)
			}
		}
		s.gBefore, s.gAfter = max(s.gBefore, res.GoroutinesBefore), max(s.gAfter, res.GoroutinesAfter)
		s.fBefore, s.fAfter = max(s.fBefore, res.FDsBefore), max(s.fAfter, res.FDsAfter)
		s.heapBefore, s.heapAfter = max(s.heapBefore, res.HeapBefore), max(s.heapAfter, res.HeapAfter)
		s.rssBefore, s.rssAfter = max(s.rssBefore, res.RSSBefore), max(s.rssAfter, res.RSSAfter)
	}
	if s.o.jsonOut != "" {
		s.dump()
	}
}

// dump writes every round's results to -json.
func (s *summary) dump() {
	type jr struct {
		Scenario, KilledIn string
		Victim, Faults     int
		Exits              []string
		Missing            []int
		Results            []*Result
	}
	var out []jr
	for _, rr := range s.rounds {
		out = append(out, jr{rr.sc.String(), rr.killedIn, rr.victim, rr.faults, rr.exits, rr.missing, rr.results})
	}
	b, _ := json.MarshalIndent(out, "", " ")
	_ = os.WriteFile(s.o.jsonOut, b, 0o644)
}

// clean reports whether the soak found nothing wrong.
func (s *summary) clean() bool {
	for _, rr := range s.rounds {
		if !rr.clean() {
			return false
		}
	}
	return s.shmLeft <= 0 && s.driverAfter[0] <= s.driverBefore[0] && s.driverAfter[1] <= s.driverBefore[1]
}

func (s *summary) total() row {
	var t row
	for _, w := range s.rows {
		t.rounds += w.rounds
		t.faults += w.faults
		t.skipped += w.skipped
		t.issued += w.issued
		t.ok += w.ok
		t.failed += w.failed
		t.hangs += w.hangs
		t.delivered += w.delivered
		t.bytes += w.bytes
		t.checksum += w.checksum
		t.dups += w.dups
		t.outOfOrder += w.outOfOrder
		t.lost += w.lost
		t.errVictim += w.errVictim
		t.errByVictim += w.errByVictim
		t.errOther += w.errOther
		t.errUnnamed += w.errUnnamed
		t.byeMissing += w.byeMissing
		t.byeAckErrors += w.byeAckErrors
		t.leaks += w.leaks
		t.exits += w.exits
		t.missing += w.missing
		t.unclean += w.unclean
	}
	return t
}

func mib(b uint64) string { return fmt.Sprintf("%.0f", float64(b)/(1<<20)) }

// table renders the summary as Markdown.
func (s *summary) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "amigo chaos soak: %d ranks per job, AMIGO_TCP_TIMEOUT=%v, rounds of %v traffic, %v in all\n\n",
		s.o.ranks, s.o.timeout, s.o.round, s.elapsed.Round(time.Second))
	b.WriteString("| scenario | rounds | rounds without fault | faults | ops | completed | failed | hangs | messages delivered | MiB | checksum failures | duplicates | out of order | lost | errors naming the victim | errors by the victim | other errors | leaks | clean |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	line := func(name string, w row) {
		clean := "yes"
		if w.unclean > 0 {
			clean = fmt.Sprintf("**no (%d)**", w.unclean)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %d | %d | %s | %d | %d | %d | %d | %d | %d | %d | %d | %s |\n",
			name, w.rounds, w.skipped, w.faults, w.issued, w.ok, w.failed, w.hangs, w.delivered, mib(w.bytes),
			w.checksum, w.dups, w.outOfOrder, w.lost, w.errVictim, w.errByVictim, w.errOther+w.errUnnamed, w.leaks+w.exits+w.missing, clean)
	}
	for _, k := range s.order {
		line(k, *s.rows[k])
	}
	line("**total**", s.total())
	t := s.total()
	fmt.Fprintf(&b, "\nGoodbyes (the last message of each pair, sent with remote completion): %d never came from a peer the rank had no error from; %d saw their remote completion fail with the peer's orderly close (an acknowledgement lost at close; such a round is not clean).\n",
		t.byeMissing, t.byeAckErrors)
	b.WriteString("\nKills, by the phase the victim was in:\n\n")
	for _, k := range s.order {
		w := s.rows[k]
		if len(w.killedIn) == 0 {
			continue
		}
		var ph []string
		for p, c := range w.killedIn {
			ph = append(ph, fmt.Sprintf("%s ×%d", p, c))
		}
		slices.Sort(ph)
		fmt.Fprintf(&b, "- %s: %s\n", k, strings.Join(ph, ", "))
	}
	for _, k := range s.order {
		if w := s.rows[k]; strings.HasPrefix(k, "budget") {
			fmt.Fprintf(&b, "- %s: %d messages held by the slow receiver; unexpected data peaked at %d bytes of a %d-byte budget\n", k, w.held, w.peakUnexpected, unexpBudget)
		}
	}
	b.WriteString("\nErrors reported (samples):\n\n")
	for _, k := range s.order {
		w := s.rows[k]
		if len(w.samples) == 0 {
			continue
		}
		fmt.Fprintf(&b, "- %s: %s\n", k, strings.Join(w.samples, "; "))
	}
	fmt.Fprintf(&b, "\nResources, largest over ranks and rounds, before Open / after Close: goroutines %d / %d, descriptors %d / %d, heap %s / %s MiB, RSS %s / %s MiB. ",
		s.gBefore, s.gAfter, s.fBefore, s.fAfter, mib(s.heapBefore), mib(s.heapAfter), mib(s.rssBefore), mib(s.rssAfter))
	fmt.Fprintf(&b, "Driver before / after: goroutines %d / %d, descriptors %d / %d. Names left in /dev/shm: %d.\n",
		s.driverBefore[0], s.driverAfter[0], s.driverBefore[1], s.driverAfter[1], max(s.shmLeft, 0))
	if len(s.tails) > 0 {
		b.WriteString("\nRounds that were not clean:\n\n```\n")
		for _, t := range s.tails {
			b.WriteString(t)
			b.WriteString("\n")
		}
		b.WriteString("```\n")
	}
	return b.String()
}
