package pmiwire

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// Lines seen from Hydra (MPICH 4.0.2) and Slurm 22.05 in PMI-1 mode.
var pmi1Transcript = []string{
	"cmd=init pmi_version=1 pmi_subversion=1\n",
	"cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n",
	"cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\n",
	"cmd=get_maxes\n",
	"cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n",
	"cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024\n",
	"cmd=my_kvsname kvsname=kvs_2657_0_690743497_vm\n",
	"cmd=universe_size size=-1\n",
	"cmd=put kvsname=kvs_2684_0_1828852237_vm key=k0 value=hello-0\n",
	"cmd=put_result rc=0 msg=success\n",
	"cmd=get_result rc=-1 msg=key_k0_not_found value=unknown\n",
	"cmd=get_result rc=1\n",
	"cmd=get_result rc=0 msg=success value=(vector,(0,1,1))\n",
	"cmd=barrier_out\n",
	"cmd=initack pmiid=0\n",
	"cmd=set size=1\n",
	"cmd=finalize_ack\n",
	"cmd=abort exitcode=7\n",
}

// Frames seen from Hydra (right-justified) and Slurm (left-justified).
var pmi2Transcript = []string{
	"    51cmd=fullinit;pmijobid=2.0;pmirank=0;threaded=FALSE;",
	"114   cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank=0;size=4;appnum=-1;debugged=FALSE;pmiverbose=FALSE;",
	"   113cmd=fullinit-response;pmi-version=2;pmi-subversion=0;rank=0;size=2;appnum=0;debugged=FALSE;pmiverbose=FALSE;rc=0;",
	"    59cmd=job-getid-response;jobid=kvs_2719_0_2038330731_vm;rc=0;",
	"68    cmd=info-getjobattr-response;rc=0;found=TRUE;value=(vector,(0,1,4));",
	"49    cmd=kvs-put;key=k0;value=addr-of-rank-0-pid-2808;",
	"28    cmd=kvs-fence-response;rc=0;",
	"    38cmd=kvs-get-response;found=FALSE;rc=0;",
	"67    cmd=kvs-get-response;rc=0;found=TRUE;value=addr-of-rank-1-pid-2809;",
	"13    cmd=finalize;",
}

func TestParseLine(t *testing.T) {
	m, err := ParseLine([]byte("cmd=get_result  rc=0 msg=success\tvalue=a=b\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Msg{Cmd: "get_result", Args: []KV{{"rc", "0"}, {"msg", "success"}, {"value", "a=b"}}}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("got %#v", m)
	}
	for _, bad := range []string{"", "\n", "cmd=", "rc=0 cmd=x", "cmd=x novalue", "cmd=x =v", "cmd=x\nk=v", "cmd=x k=\x00"} {
		if _, err := ParseLine([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseLine(%q): %v", bad, err)
		}
	}
	for _, l := range pmi1Transcript {
		if _, err := ParseLine([]byte(l)); err != nil {
			t.Errorf("%q: %v", l, err)
		}
	}
	if _, err := AppendLine(nil, Msg{Cmd: "put", Args: []KV{{"value", "has space"}}}); err == nil {
		t.Error("value with a blank encoded")
	}
	if _, err := AppendLine(nil, Msg{Cmd: "put", Args: []KV{{"k=", "v"}}}); err == nil {
		t.Error("key with = encoded")
	}
}

// TestHeaderJustification: lengths padded on either side, or both.
func TestHeaderJustification(t *testing.T) {
	for h, n := range map[string]int{"38    ": 38, "    38": 38, "  38  ": 38, "000038": 38, "1     ": 1, "65536 ": 65536} {
		got, err := ParseHeader([]byte(h))
		if err != nil || got != n {
			t.Errorf("ParseHeader(%q) = %d, %v", h, got, err)
		}
	}
	for _, h := range []string{"      ", "3 8   ", "-1    ", "0     ", "999999", "abcdef", "+38   ", "38\x00   ", "38"} {
		if _, err := ParseHeader([]byte(h)); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseHeader(%q): %v", h, err)
		}
	}
	m := Msg{Cmd: "kvs-fence-response", Args: []KV{{"rc", "0"}}}
	for j, want := range map[Justify]string{Left: "28    cmd=kvs-fence-response;rc=0;", Right: "    28cmd=kvs-fence-response;rc=0;"} {
		b, err := AppendFrame(nil, m, j)
		if err != nil || string(b) != want {
			t.Errorf("AppendFrame(%v) = %q, %v; want %q", j, b, err, want)
		}
	}
}

func TestParseFrame(t *testing.T) {
	for _, f := range pmi2Transcript {
		m, n, err := ParseFrame([]byte(f + "trailing"))
		if err != nil || n != len(f) {
			t.Errorf("%q: n=%d %v", f, n, err)
			continue
		}
		if _, _, err := ParseFrame([]byte(f[:len(f)-1])); err != ErrShort {
			t.Errorf("%q cut short: %v", f, err)
		}
		_ = m
	}
	m, _, _ := ParseFrame([]byte(pmi2Transcript[4]))
	if v, _ := m.Get("value"); v != "(vector,(0,1,4))" || m.Cmd != "info-getjobattr-response" {
		t.Errorf("got %v", m)
	}
	for _, bad := range []string{"cmd=x;;k=v;", "cmd=x;k=v;;", "k=v;cmd=x;", "cmd=;", ";", "cmd=x;novalue;", "cmd=x;=v;"} {
		if _, err := ParseBody([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseBody(%q): %v", bad, err)
		}
	}
	// The final ';' is optional.
	if m, err := ParseBody([]byte("cmd=x;k=v")); err != nil || m.Args[0].Value != "v" {
		t.Errorf("no trailing ';': %v %v", m, err)
	}
	if _, err := AppendFrame(nil, Msg{Cmd: "kvs-put", Args: []KV{{"value", "a;b"}}}, Right); err == nil {
		t.Error("value with ; encoded")
	}
}

func TestProcessMapping(t *testing.T) {
	for s, want := range map[string][]int{
		"(vector,(0,1,4))":                 {0, 0, 0, 0},
		"(vector,(0,4,1))":                 {0, 1, 2, 3},
		"(vector,(0,2,2))":                 {0, 0, 1, 1},
		"(vector,(0,1,1))":                 {0, 0, 0, 0}, // Hydra, one host: repeats
		"(vector,(0,2,1))":                 {0, 1, 0, 1}, // round-robin
		"(vector,(0,2,2),(2,1,3))":         {0, 0, 1, 1, 2, 2, 2},
		"(vector,(1,1,3),(0,1,1))":         {1, 1, 1, 0},
		" ( vector , ( 0 , 1 , 2 ) ) ":     {0, 0},
		"(vector,(3,2,1),(0,3,1),(5,1,2))": {3, 4, 0, 1, 2, 5, 5, 3},
	} {
		blocks, err := ParseProcessMapping(s)
		if err != nil {
			t.Errorf("%q: %v", s, err)
			continue
		}
		got, err := Nodes(blocks, len(want))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: nodes %v, %v; want %v", s, got, err, want)
		}
	}
	for _, bad := range []string{"", "(vector)x", "vector,(0,1,4)", "(vector,(0,1))", "(vector,(0,0,4))", "(vector,(0,1,0))",
		"(vector,(0,1,4)", "(vector,(-1,1,4))", "(vector,(0,1,4),)", "(hybrid,(0,1,4))", "(vector,(99999999,1,1))"} {
		if blocks, err := ParseProcessMapping(bad); err == nil {
			if _, err := Nodes(blocks, 4); err == nil {
				t.Errorf("%q accepted", bad)
			}
		}
	}
	for _, nodes := range [][]int{{0}, {0, 0, 0, 0}, {0, 1, 2, 3}, {0, 0, 1, 1, 1}, {2, 2, 0, 1, 1, 1}, {0, 1, 0, 1}} {
		s := FormatProcessMapping(nodes)
		blocks, err := ParseProcessMapping(s)
		if err != nil {
			t.Fatalf("%v → %q: %v", nodes, s, err)
		}
		if got, _ := Nodes(blocks, len(nodes)); !reflect.DeepEqual(got, nodes) {
			t.Errorf("%v → %q → %v", nodes, s, got)
		}
	}
	if s := FormatProcessMapping([]int{0, 0, 1, 1}); s != "(vector,(0,2,2))" {
		t.Errorf("FormatProcessMapping = %q", s)
	}
}

func TestValue(t *testing.T) {
	v := []byte{0, ' ', ';', '=', 0xff, '\n'}
	enc := AppendValue(nil, v)
	if bytes.ContainsAny(enc, " ;=\n\t") {
		t.Fatalf("encoding %q has a separator", enc)
	}
	got, err := DecodeValue(string(enc))
	if err != nil || !bytes.Equal(got, v) {
		t.Fatalf("round trip: %v %v", got, err)
	}
	if _, err := DecodeValue("a+b/"); !errors.Is(err, ErrMalformed) {
		t.Fatalf("std base64 accepted: %v", err)
	}
}

func FuzzParseLine(f *testing.F) {
	for _, l := range pmi1Transcript {
		f.Add([]byte(l))
	}
	f.Add([]byte("cmd=x k==v  \r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseLine(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		enc, err := AppendLine(nil, m)
		if err != nil {
			return // parsed values may hold what our encoder refuses (e.g. '\r')
		}
		m2, err := ParseLine(enc)
		if err != nil || !reflect.DeepEqual(normalize(m), normalize(m2)) {
			t.Fatalf("re-encoding %q as %q: %v, %v", b, enc, m2, err)
		}
	})
}

func FuzzParseFrame(f *testing.F) {
	for _, fr := range pmi2Transcript {
		f.Add([]byte(fr))
		f.Add([]byte(fr + fr)) // two frames back to back
		f.Add([]byte(fr[:len(fr)/2]))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, n, err := ParseFrame(b)
		if err != nil {
			if err != ErrShort && !errors.Is(err, ErrMalformed) {
				t.Fatalf("unexpected error type: %v", err)
			}
			return
		}
		if n < HeaderLen+1 || n > len(b) {
			t.Fatalf("n = %d of %d", n, len(b))
		}
		// Any prefix is incomplete, never a different message.
		for _, k := range []int{0, HeaderLen - 1, HeaderLen, n - 1} {
			if k >= 0 && k < n {
				if _, _, err := ParseFrame(b[:k]); err != ErrShort && !errors.Is(err, ErrMalformed) {
					t.Fatalf("prefix of %d bytes: %v", k, err)
				}
			}
		}
		for _, j := range []Justify{Left, Right} {
			enc, err := AppendFrame(nil, m, j)
			if err != nil {
				return
			}
			m2, n2, err := ParseFrame(enc)
			if err != nil || n2 != len(enc) || !reflect.DeepEqual(normalize(m), normalize(m2)) {
				t.Fatalf("re-encoding %q as %q: %v, %v", b[:n], enc, m2, err)
			}
		}
	})
}

func FuzzProcessMapping(f *testing.F) {
	for _, s := range []string{"(vector,(0,1,4))", "(vector,(0,2,2),(2,1,3))", "(vector,(0,1,1))", "(vector)", " ( vector , ( 0 , 1 , 2 ) ) "} {
		f.Add(s, uint8(4))
	}
	f.Fuzz(func(t *testing.T, s string, size uint8) {
		blocks, err := ParseProcessMapping(s)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("unexpected error type: %v", err)
			}
			return
		}
		nodes, err := Nodes(blocks, int(size))
		if err != nil {
			return
		}
		if len(nodes) != int(size) {
			t.Fatalf("%d nodes for %d ranks", len(nodes), size)
		}
		// Formatting the expansion and expanding again is the identity.
		s2 := FormatProcessMapping(nodes)
		if size == 0 {
			return
		}
		b2, err := ParseProcessMapping(s2)
		if err != nil {
			t.Fatalf("%q → %v → %q: %v", s, nodes, s2, err)
		}
		if n2, err := Nodes(b2, int(size)); err != nil || !reflect.DeepEqual(n2, nodes) {
			t.Fatalf("%q → %v → %q → %v", s, nodes, s2, n2)
		}
	})
}

func FuzzValue(f *testing.F) {
	f.Add([]byte{}, "")
	f.Add([]byte("10.0.0.1:4000"), "MTAuMC4wLjE6NDAwMA")
	f.Add([]byte{0xff, 0, ';', '='}, "_wA7PQ")
	f.Fuzz(func(t *testing.T, v []byte, s string) {
		enc := AppendValue(nil, v)
		if strings.ContainsAny(string(enc), " ;=\n\t\r\x00") || len(enc) != EncodedLen(len(v)) {
			t.Fatalf("bad encoding %q", enc)
		}
		if got, err := DecodeValue(string(enc)); err != nil || !bytes.Equal(got, v) {
			t.Fatalf("round trip of %x: %x %v", v, got, err)
		}
		if b, err := DecodeValue(s); err == nil && string(AppendValue(nil, b)) != s {
			// Non-canonical encodings (stray low bits) are accepted by
			// encoding/base64 with Strict unset; they must still decode.
			_ = b
		}
	})
}

// normalize makes nil and empty Args compare equal.
func normalize(m Msg) string { return fmt.Sprintf("%s|%q", m.Cmd, m.Args) }
