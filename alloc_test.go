package amigo_test

import (
	"testing"
	"time"

	"github.com/amigo-hpc/amigo"
)

// twoRanks returns two in-process ranks whose contexts the test goroutine
// advances itself, so that AllocsPerRun sees only amigo's work.
func twoRanks(t *testing.T, cfg amigo.Config) (c0, c1 *amigo.Context) {
	t.Helper()
	cl, err := amigo.NewLocal(2, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range cl {
			c.Close()
		}
	})
	return cl[0].Context(0), cl[1].Context(0)
}

// advanceUntil advances both contexts until cond holds. Its bound is time,
// not a count of advances: over a socket, a loaded machine can take a
// million empty advances before the peer's bytes arrive.
func advanceUntil(t testing.TB, cond func() bool, cs ...*amigo.Context) {
	deadline := time.Now().Add(advanceBound)
	for i := 0; !cond(); i++ {
		if i%1024 == 0 && time.Now().After(deadline) {
			t.Fatalf("no progress in %v (%d advances)", advanceBound, i)
		}
		for _, c := range cs {
			c.Advance()
		}
	}
}

// advanceBound is how long advanceUntil waits for its condition.
const advanceBound = 60 * time.Second

func requireZeroAllocs(t *testing.T, name string, f func()) {
	t.Helper()
	for i := 0; i < 100; i++ { // warm up: peers connect, tables grow
		f()
	}
	if n := testing.AllocsPerRun(1000, f); n != 0 {
		t.Errorf("%s: %v allocations per message, want 0", name, n)
	}
}

func TestZeroAllocs(t *testing.T) {
	c0, c1 := twoRanks(t, amigo.Config{})
	hdr := []byte("hdr")
	small := make([]byte, 256)
	recvd := 0
	var sink byte
	if err := c1.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
		recvd++
		if len(m.Data) > 0 {
			sink += m.Data[0]
		}
	}); err != nil {
		t.Fatal(err)
	}
	ep1 := amigo.EndpointOf(1)

	t.Run("SendImmediate", func(t *testing.T) {
		want := recvd
		requireZeroAllocs(t, "sender and receiver", func() {
			want++
			if err := c0.SendImmediate(ep1, 1, hdr, small[:8]); err != nil {
				t.Fatal(err)
			}
			advanceUntil(t, func() bool { return recvd == want }, c0, c1)
		})
		sender := 0
		requireZeroAllocs(t, "sender side", func() {
			if err := c0.SendImmediate(ep1, 1, hdr, small[:8]); err != nil {
				t.Fatal(err)
			}
			c0.Advance()
			sender++
			if sender%64 == 0 {
				advanceUntil(t, func() bool { return recvd == want+sender }, c1)
			}
		})
		advanceUntil(t, func() bool { return recvd == want+sender }, c0, c1)
	})

	t.Run("Send", func(t *testing.T) {
		completed := 0
		done := func(err error) {
			if err != nil {
				t.Error(err)
			}
			completed++
		}
		want := 0
		requireZeroAllocs(t, "small Send with done callback", func() {
			want++
			if err := c0.Send(ep1, 1, hdr, small, done); err != nil {
				t.Fatal(err)
			}
			advanceUntil(t, func() bool { return completed == want }, c0, c1)
		})
		// A window of them, written straight into the descriptor buffer
		// by the posting goroutine, their callbacks run by the next
		// Advance.
		requireZeroAllocs(t, "window of 64 small Sends with done callbacks", func() {
			for j := 0; j < 64; j++ {
				want++
				if err := c0.Send(ep1, 1, hdr, small[:8], done); err != nil {
					t.Fatal(err)
				}
			}
			advanceUntil(t, func() bool { return completed == want }, c0, c1)
		})
		rdone := 0
		remote := func(err error) {
			if err != nil {
				t.Error(err)
			}
			rdone++
		}
		p := &amigo.SendParams{Dest: ep1, Dispatch: 1, Header: hdr, Data: small, Done: done, RemoteDone: remote}
		wantR := 0
		requireZeroAllocs(t, "small Send with remote completion", func() {
			wantR++
			if err := c0.SendWith(p); err != nil {
				t.Fatal(err)
			}
			advanceUntil(t, func() bool { return rdone == wantR }, c0, c1)
		})
	})

	t.Run("Rendezvous", func(t *testing.T) {
		big := make([]byte, 64<<10)
		dst := make([]byte, len(big))
		got, sent := 0, 0
		rdone := func(err error) {
			if err != nil {
				t.Error(err)
			}
			got++
		}
		if err := c1.SetDispatch(2, func(c *amigo.Context, m *amigo.Message) {
			if err := m.Receive(dst, rdone); err != nil {
				t.Error(err)
			}
		}); err != nil {
			t.Fatal(err)
		}
		sdone := func(err error) {
			if err != nil {
				t.Error(err)
			}
			sent++
		}
		want := 0
		requireZeroAllocs(t, "rendezvous Send", func() {
			want++
			if err := c0.Send(ep1, 2, hdr, big, sdone); err != nil {
				t.Fatal(err)
			}
			advanceUntil(t, func() bool { return got == want && sent == want }, c0, c1)
		})
	})

	t.Run("PutGet", func(t *testing.T) {
		region, err := c1.Client().RegisterMemory(make([]byte, 4096))
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 512)
		n := 0
		done := func(err error) {
			if err != nil {
				t.Error(err)
			}
			n++
		}
		want := 0
		requireZeroAllocs(t, "Put and Get", func() {
			want += 2
			if err := c0.Put(ep1, buf, region.Key(), 100, done); err != nil {
				t.Fatal(err)
			}
			if err := c0.Get(ep1, buf, region.Key(), 1000, done); err != nil {
				t.Fatal(err)
			}
			advanceUntil(t, func() bool { return n == want }, c0, c1)
		})
	})

	t.Run("Atomic", func(t *testing.T) {
		region, err := c1.Client().RegisterMemory(make([]byte, 4096))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		var old int64
		var swapped uint64
		done := func(err error) {
			if err != nil {
				t.Error(err)
			}
			n++
		}
		p := amigo.AtomicParams{Dest: ep1, Remote: region.Key(), Offset: 64, Op: amigo.AtomicCAS, Type: amigo.Uint64, Result: &swapped, Done: done}
		want := 0
		requireZeroAllocs(t, "FetchAdd and Atomic", func() {
			want += 2
			if err := c0.FetchAdd(ep1, region.Key(), 8, 1, &old, done); err != nil {
				t.Fatal(err)
			}
			if err := c0.Atomic(&p); err != nil {
				t.Fatal(err)
			}
			advanceUntil(t, func() bool { return n == want }, c0, c1)
		})
		if old+1 != int64(want/2) {
			t.Errorf("last fetch-add fetched %d after %d adds", old, want/2)
		}
	})
}
