package amigo_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/amigo-hpc/amigo"
	"github.com/amigo-hpc/amigo/amigotest"
)

func TestSmoke(t *testing.T) {
	amigotest.Run(t, 2, amigotest.Options{}, func(r *amigotest.Rank) error {
		c := r.Ctx
		peer := amigo.EndpointOf(1 - r.Rank())
		got := 0
		var big []byte
		bigDone := false
		c.SetDispatch(1, func(c *amigo.Context, m *amigo.Message) {
			if m.Inline() {
				got++
				return
			}
			big = make([]byte, m.Size())
			if err := m.Receive(big, func(err error) {
				if err != nil {
					fmt.Println("recv", err)
				}
				bigDone = true
			}); err != nil {
				panic(err)
			}
		})
		if err := r.Barrier(); err != nil {
			return err
		}
		for i := 0; i < 100; i++ {
			if err := c.SendImmediate(peer, 1, []byte("h"), []byte("data")); err != nil {
				return err
			}
		}
		payload := bytes.Repeat([]byte{byte(r.Rank() + 1)}, 1<<20)
		sent := false
		if err := c.Send(peer, 1, []byte("hdr"), payload, func(err error) {
			if err != nil {
				fmt.Println("send", err)
			}
			sent = true
		}); err != nil {
			return err
		}
		if err := c.Wait(r.Deadline, func() bool { return got == 100 && bigDone && sent }); err != nil {
			return fmt.Errorf("wait: got %d big %v sent %v: %w %+v", got, bigDone, sent, err, c.Stats())
		}
		if !bytes.Equal(big, bytes.Repeat([]byte{byte(2 - r.Rank())}, 1<<20)) {
			return fmt.Errorf("big payload corrupt")
		}
		return r.Barrier()
	})
}
