package amigo_test

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
)

// TestCopyTo streams inline messages of 100 bytes up to the inline limit,
// with headers of several lengths, over shared memory and in-process
// links, through enough laps of the descriptor buffer that its slots are
// reused many times; the receiver takes each message out by CopyTo (whole,
// into a shorter buffer, or by Receive) and checks the bytes, and that
// m.Data is nil after. CopyTo zeroes the buffer's slot words as it copies
// a large message out, and the give-back skips them: a mistake there
// loses or corrupts the messages that follow.
//
// Both sides copy the data with each setting of Config.Copy: the string
// move from 32 KiB on, Go's copy always, the string move always.
func TestCopyTo(t *testing.T) {
	for _, over := range []string{"shm", "loop"} {
		for _, way := range []string{"auto", "go", "movsb"} {
			t.Run(over+"/"+way, func(t *testing.T) { testCopyTo(t, over, way) })
		}
	}
}

func testCopyTo(t *testing.T, over, way string) {
	cfg := amigo.Config{Copy: way}
	if over == "shm" {
		// Set, as shared memory chooses it for two ranks, so that every
		// message goes inline, those of a window too (with the limit
		// left to the adapter, one of more than 16 KiB behind another
		// the peer has not taken goes as a large message).
		cfg.InlineMax, cfg.RingSlots = 32<<10+512, 8192
	}
	cl := openOver(t, 2, cfg, over)
	max := cl[0].Limits().InlineMax
	sizes := []int{100, 4096, 8000, 8192, 8200, 16384, 20000, 32768, max - 64, max - 24}
	headers := [][]byte{nil, []byte("hdr"), bytes.Repeat([]byte{7}, 24)}
	const total = 600
	pattern := func(i, n int) []byte {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(i*13 + j*7 + j>>8)
		}
		return b
	}
	sizeOf := func(i int) int { return min(sizes[i%len(sizes)], max-len(headers[i%len(headers)])) }
	r0, r1 := cl[0].Context(0), cl[1].Context(0)
	got, bad := 0, ""
	buf := make([]byte, max)
	r1.SetDispatch(3, func(_ *amigo.Context, m *amigo.Message) {
		i := got
		got++
		want := pattern(i, sizeOf(i))
		if !m.Inline() {
			bad = fmt.Sprintf("message %d of %d bytes not inline", i, m.Size())
			return
		}
		var n int
		switch i % 3 {
		case 0:
			n = m.CopyTo(buf)
		case 1:
			n = m.CopyTo(buf[:len(want)/2])
			want = want[:len(want)/2]
		case 2:
			if err := m.Receive(buf, nil); err != nil {
				bad = err.Error()
				return
			}
			n = len(want)
		}
		if n != len(want) || !bytes.Equal(buf[:n], want) {
			bad = fmt.Sprintf("message %d (%d bytes, way %d): %d copied, equal %v", i, m.Size(), i%3, n, bytes.Equal(buf[:n], want))
		}
		if m.Data != nil {
			bad = fmt.Sprintf("message %d: Data still set after the copy", i)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	errc := make(chan error, 1)
	var finished atomic.Bool
	go func() {
		errc <- r1.Wait(ctx, func() bool { return got == total || bad != "" })
		finished.Store(true)
	}()
	for i := 0; i < total; i++ {
		k := amigo.NewCounter()
		k.Add(1)
		if err := r0.Send(amigo.EndpointOf(1), 3, headers[i%len(headers)], pattern(i, sizeOf(i)), k.Done()); err != nil {
			t.Fatal(err)
		}
		// Sends complete at once inline; every tenth waits, so
		// that windows of several messages share the buffer. A
		// receiver that found a bad message stops taking them: the
		// sender stops too, and the test reports what was bad.
		if i%10 == 9 {
			if err := r0.Wait(ctx, func() bool { return k.Pending() == 0 || finished.Load() }); err != nil {
				t.Fatal(err)
			}
		}
		if finished.Load() {
			break
		}
	}
	// The sender keeps progressing until the receiver is done.
	if err := r0.Wait(ctx, finished.Load); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if bad != "" {
		t.Fatal(bad)
	}
}
