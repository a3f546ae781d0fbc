package pmiserver

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"
)

// converse sends each request line on a fresh PMI_PORT connection and
// returns the reply lines, one string per request.
func converse(t *testing.T, s *Server, reqs []string, replies []int) []string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(l)
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	var out []string
	for i, r := range reqs {
		if _, err := c.Write([]byte(r)); err != nil {
			t.Fatal(err)
		}
		var got []string
		for range replies[i] {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("after %q: %v", r, err)
			}
			got = append(got, strings.TrimSuffix(line, "\n"))
		}
		out = append(out, strings.Join(got, " | "))
	}
	return out
}

// TestPMI1Golden is a PMI_PORT conversation in the shape Hydra has it.
func TestPMI1Golden(t *testing.T) {
	s, _ := New(Config{Size: 1, KVSName: "kvs_1", ProcessMapping: "(vector,(0,1,1))", ValMax: 32})
	defer s.Close()
	got := converse(t, s, []string{
		"cmd=initack pmiid=0\n",
		"cmd=init pmi_version=1 pmi_subversion=1\n",
		"cmd=get_maxes\n",
		"cmd=get_my_kvsname\n",
		"cmd=put kvsname=kvs_1 key=k value=v\n",
		"cmd=get kvsname=kvs_1 key=k\n",
		"cmd=barrier_in\n",
		"cmd=get kvsname=kvs_1 key=k\n",
		"cmd=get kvsname=kvs_1 key=PMI_process_mapping\n",
		"cmd=put kvsname=kvs_1 key=big value=" + strings.Repeat("x", 33) + "\n",
		"cmd=bogus\n",
		"cmd=finalize\n",
	}, []int{4, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1})
	want := []string{
		"cmd=initack rc=0 | cmd=set size=1 | cmd=set rank=0 | cmd=set debug=0",
		"cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0",
		"cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=32",
		"cmd=my_kvsname rc=0 kvsname=kvs_1",
		"cmd=put_result rc=0 msg=success",
		"cmd=get_result rc=-1 msg=key_k_not_found value=unknown",
		"cmd=barrier_out rc=0",
		"cmd=get_result rc=0 msg=success value=v",
		"cmd=get_result rc=0 msg=success value=(vector,(0,1,1))",
		"cmd=put_result rc=-1 msg=value_of_33_bytes_exceeds_vallen_max_32",
		"cmd=error rc=-1 msg=unknown_command_bogus",
		"cmd=finalize_ack rc=0",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !s.Finalized(0) || !s.Connected(0) {
		t.Error("rank 0 not recorded as connected and finalized")
	}
}

// TestRejects: a second connection claiming a bound rank, and a rank out
// of range, are refused by closing the connection.
func TestRejects(t *testing.T) {
	s, _ := New(Config{Size: 1})
	defer s.Close()
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.Serve(l)
	for _, first := range []string{"cmd=initack pmiid=5\n", "cmd=get_maxes\n", "garbage\n", "999999cmd=x;\n"} {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write([]byte(first))
		if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
			t.Errorf("%q got a reply", first)
		}
		c.Close()
	}
	if got := ProcessMapping([]int{0, 0, 1, 1}); got != "(vector,(0,2,2))" {
		t.Errorf("ProcessMapping = %q", got)
	}
}

// A rank the launcher lost: the fence in progress, which waited for it
// only, completes; later fences do not wait for it; the ranks read it
// under LostKey at once.
func TestLost(t *testing.T) {
	s, _ := New(Config{Size: 3, KVSName: "kvs_1"})
	defer s.Close()
	if _, ok := s.get(LostKey); ok {
		t.Fatal("LostKey set before any rank was lost")
	}
	entered := make(chan error, 2)
	for _, r := range []int{0, 1} {
		go func() { entered <- s.fence(r) }()
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		n := s.arrived
		s.mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("ranks 0 and 1 did not enter the fence")
		}
	}
	select {
	case err := <-entered:
		t.Fatalf("fence completed without rank 2: %v", err)
	default:
	}
	s.Lost(2)
	for range 2 {
		select {
		case err := <-entered:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("fence did not complete once rank 2 was lost")
		}
	}
	s.Lost(1)
	s.Lost(1)
	if v, ok := s.get(LostKey); !ok || v != "2,1" {
		t.Fatalf("LostKey %q %v, want \"2,1\"", v, ok)
	}
	if err := s.fence(0); err != nil { // alone now
		t.Fatal(err)
	}
}
