package amigo_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
)

// keepData returns the data of message seq of n bytes: seq in its first 8
// bytes, then at every 8-byte offset a word that reads as the header of a
// one-slot descriptor of 8 bytes. With the message's header 0 to 7 bytes
// long, for one header length in 8 these words lie at the header word
// positions of the descriptor buffer's slots.
func keepData(seq uint64, n int) []byte {
	b := make([]byte, n)
	binary.LittleEndian.PutUint64(b, seq)
	for off := 8; off+8 <= n; off += 8 {
		binary.LittleEndian.PutUint64(b[off:], 1|8<<32)
	}
	return b
}

// Inline messages of 2 to 8 KiB over shared memory, each window's slots
// given back unzeroed ("on"), as measured ("auto") or zeroed ("off"):
// every message arrives once, whole and in order, and nothing arrives that
// was not sent, whether its handler copied it out (CopyTo) or read it
// where it lay, though the slots it leaves hold words that read as
// headers. With "on" and "auto", Stats counts the epochs of the data read
// in place by way; "off" counts none.
func TestShmKeep(t *testing.T) {
	for _, keep := range []string{"on", "auto", "off"} {
		t.Run(keep, func(t *testing.T) {
			cl := shmPair(t, amigo.Config{Shm: amigo.ShmConfig{Keep: keep}})
			c0, c1 := cl[0].Context(0), cl[1].Context(0)
			sizes := []int{2<<10 + 100, 4 << 10, 3<<10 + 8, 8<<10 - 200}
			const windows, window = 200, 64
			const total = windows * window
			var got uint64
			var bad error
			buf := make([]byte, 8<<10)
			c1.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
				if bad != nil {
					return
				}
				if !m.Inline() {
					bad = fmt.Errorf("message %d of %d bytes did not travel inline", got, m.Size())
					return
				}
				want := keepData(got, sizes[got%4])
				data := m.Data
				if got%3 == 0 {
					data = buf[:m.CopyTo(buf)]
				}
				if !bytes.Equal(data, want) || len(m.Header) != int(got%8) {
					bad = fmt.Errorf("message %d: %d bytes (header %d), want %d (header %d), equal %v", got, len(data), len(m.Header), len(want), got%8, bytes.Equal(data, want))
					return
				}
				got++
			})
			header := make([]byte, 8)
			msgs := make([][]byte, len(sizes)*8)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				done <- c1.Wait(ctx, func() bool { return got >= total || bad != nil })
			}()
			k := amigo.NewCounter()
			for seq := uint64(0); seq < total; seq++ {
				msg := keepData(seq, sizes[seq%4])
				msgs[seq%uint64(len(msgs))] = msg // alive until the window's counter
				k.Add(1)
				if err := c0.Send(amigo.EndpointOf(1), 1, header[:seq%8], msg, k.Done()); err != nil {
					t.Fatal(err)
				}
				if seq%window == window-1 {
					if err := c0.WaitCounter(ctx, k); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := c0.WaitCounter(ctx, k); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if bad != nil {
				t.Fatal(bad)
			}
			// The receiver's goroutine is done with c1.
			if got != total {
				t.Fatalf("%d messages received, want %d", got, total)
			}
			st := c1.Stats()
			epochs := st.KeepZeroed + st.KeepKept
			switch {
			case keep == "off" && epochs != 0:
				t.Fatalf("off: %d epochs counted", epochs)
			case keep == "on" && (st.KeepKept == 0 || st.KeepZeroed != 0):
				t.Fatalf("on: %d epochs kept, %d zeroed", st.KeepKept, st.KeepZeroed)
			case keep == "auto" && (st.KeepKept == 0 || st.KeepZeroed == 0):
				t.Fatalf("auto: %d epochs kept, %d zeroed: both ways are tried", st.KeepKept, st.KeepZeroed)
			}
			t.Logf("%s: %d epochs kept, %d zeroed", keep, st.KeepKept, st.KeepZeroed)
		})
	}
}
