package shm

import "testing"

// The owner's share of a batch follows where the owner stood when the
// initiator had moved its fronts: a sixteenth more when it had moved its
// backs, a sixteenth less when it was still moving them or had not
// claimed them, within shareMin and shareMax; coopBack gives that share
// of a descriptor in whole pages.
func TestJudgeShare(t *testing.T) {
	const id = 7
	var ch channel
	l := &link{share: shareStart}
	ownerDone := func() { ch.claim.Store(claimWord(id, 1, 1)); ch.done.Store(3) }
	ownerBusy := func() { ch.claim.Store(claimWord(id, 1, 1)); ch.done.Store(1) }
	unclaimed := func() { ch.claim.Store(claimWord(id, 1, 2)); ch.done.Store(0) }
	stolen := func() { ch.claim.Store(claimWord(id, 2, 2)); ch.done.Store(3) }
	steps := []struct {
		name  string
		set   func()
		share uint8
	}{
		{"owner done", ownerDone, shareStart + 1},
		{"owner done", ownerDone, shareStart + 2},
		{"owner still copying", ownerBusy, shareStart + 1},
		{"owner has not claimed", unclaimed, shareStart},
		{"initiator took the backs", stolen, shareStart - 1},
	}
	for i, s := range steps {
		s.set()
		l.judgeShare(&ch)
		if l.share != s.share {
			t.Fatalf("step %d (%s): share %d, want %d", i, s.name, l.share, s.share)
		}
	}
	for i := 0; i < 20; i++ {
		ownerDone()
		l.judgeShare(&ch)
	}
	if l.share != shareMax {
		t.Fatalf("after 20 batches the owner finished first: share %d, want %d", l.share, shareMax)
	}
	for i := 0; i < 20; i++ {
		unclaimed()
		l.judgeShare(&ch)
	}
	if l.share != shareMin {
		t.Fatalf("after 20 batches the owner did not claim: share %d, want %d", l.share, shareMin)
	}
	for _, c := range []struct {
		n     int
		share uint8
		back  int
	}{
		{32 << 10, 4, 8 << 10}, {32 << 10, 6, 12 << 10}, {32 << 10, 2, 4 << 10},
		{12 << 10, 2, 4 << 10},  // an eighth of three pages: one, not none
		{48 << 10, 6, 20 << 10}, // 18 KiB, to the nearest page
		{64 << 10, 5, 20 << 10},
		{128 << 10, 6, 48 << 10},
	} {
		if got := coopBack(c.n, c.share); got != c.back {
			t.Errorf("coopBack(%d, %d) = %d, want %d", c.n, c.share, got, c.back)
		}
	}
	// Every size a batch splits, at every share: whole pages, at least
	// one, and at least a page left in front (startCoop slices the
	// descriptor there).
	for n := coopSplitMin; n < batchBelow; n += 512 {
		for share := uint8(shareMin); share <= shareMax; share++ {
			b := coopBack(n, share)
			if b%pageSize != 0 || b < pageSize || n-b < pageSize {
				t.Fatalf("coopBack(%d, %d) = %d", n, share, b)
			}
		}
	}
}
