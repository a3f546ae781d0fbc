//go:build ofi

package ofi

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/amigo-hpc/amigo/internal/fifo"
	"github.com/amigo-hpc/amigo/transport"
)

// cardOf is a card as a peer of provider prov with ring slots would
// publish it, naming the given endpoints.
func cardOf(prov string, slots int, names ...[]byte) []byte {
	b := append([]byte{byte(len(prov))}, prov...)
	b = binary.LittleEndian.AppendUint32(b, uint32(slots))
	b = binary.LittleEndian.AppendUint16(b, uint16(len(names)))
	for _, n := range names {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(n)))
		b = append(b, n...)
	}
	return b
}

// A card comes from another process through the bootstrap: whatever it
// holds, parseCard returns names or an error, without a panic, every name
// it returns is within what the adapter hands the provider, and a card it
// accepts is the one the names make.
func FuzzParseCard(f *testing.F) {
	a := &Adapter{prov: "shm", opts: Options{RingSlots: 1024}}
	f.Add(cardOf("shm", 1024, []byte("fi_shm://amigo-1-2-abcdef")))
	f.Add(cardOf("shm", 1024, []byte("a"), []byte("bc")))
	f.Add(cardOf("shm", 1024, []byte{}))
	f.Add(cardOf("shm", 512, []byte("a")))
	f.Add(cardOf("tcp;ofi_rxm", 1024, []byte("a")))
	f.Add([]byte{})
	f.Add([]byte{200})
	f.Fuzz(func(t *testing.T, b []byte) {
		names, err := a.parseCard(b)
		if err != nil {
			return
		}
		for _, n := range names {
			if len(n) == 0 || len(n) >= nameRoom {
				t.Fatalf("accepted a name of %d bytes", len(n))
			}
		}
		again := cardOf(a.prov, a.opts.RingSlots, names...)
		if !bytes.HasPrefix(b, again) {
			t.Fatalf("card %x parsed into names that make %x", b, again)
		}
	})
}

// TestMalformedCard: a peer whose card names an endpoint of one byte, or
// of none, is refused when the job starts or unreachable when first used;
// the process does not crash, and the provider never reads past what the
// adapter gave it.
func TestMalformedCard(t *testing.T) {
	for _, prov := range providers() {
		t.Run(prov, func(t *testing.T) {
			for _, tc := range []struct {
				name      string
				endpoint  []byte
				startFail bool
			}{
				{"one byte", []byte("x"), false},
				{"empty", []byte{}, true},
			} {
				js := jobs(2)
				var ads []*Adapter
				for r := range js {
					a, err := New(js[r], transport.NewRegions(), Options{Provider: prov, Timeout: 2 * time.Second, Logf: func(string, ...any) {}})
					if err != nil {
						t.Fatal(err)
					}
					ads = append(ads, a)
				}
				if err := js[1].Put(KVSKey, cardOf(prov, ads[1].opts.RingSlots, tc.endpoint)); err != nil {
					t.Fatal(err)
				}
				err := ads[0].Start(context.Background())
				if tc.startFail {
					if err == nil {
						t.Errorf("%s: Start accepted the card", tc.name)
					}
				} else if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				} else {
					p, err := ads[0].Open(0, transport.NewDoorbell())
					if err != nil {
						t.Fatal(err)
					}
					l, err := p.Link(transport.Addr{Rank: 1})
					if err == nil {
						// Accepted by the address vector (shm maps a
						// peer on first send, and its sends to one it
						// cannot map wait): the link fails once its
						// packet has waited Options.Timeout.
						tr := fifo.New(l.Msg.Slots(), l.Msg.HeadCounter(), l.Msg.TransferCounter(), nil)
						writePacket(t, l, tr, 8, func() {})
						for deadline := time.Now().Add(30 * time.Second); l.Err() == nil && time.Now().Before(deadline); {
							p.Progress()
							p.Poll(&cnt{}, 64)
						}
						err = l.Err()
					}
					var pe *transport.PeerError
					if !errors.As(err, &pe) || pe.Addr.Rank != 1 {
						t.Errorf("%s: link to rank 1: %v, want a *transport.PeerError naming rank 1", tc.name, err)
					}
					t.Logf("%s: %v", tc.name, err)
				}
				ads[0].Close()
				ads[1].Close()
			}
		})
	}
}
