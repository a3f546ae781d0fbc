package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	hdr, data := []byte("header"), []byte("some data")
	for _, ack := range []bool{false, true} {
		b := make([]byte, AMSize(len(hdr), len(data), ack))
		PutAM(b, 7, hdr, data, ack, 0xdeadbeef)
		p, err := Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		if p.Kind != KindAM || p.Dispatch != 7 || !bytes.Equal(p.Header, hdr) || !bytes.Equal(p.Data, data) {
			t.Fatalf("AM ack=%v: %+v", ack, p)
		}
		if ack != (p.Flags&FlagAck != 0) || ack && p.Op != 0xdeadbeef {
			t.Fatalf("AM ack=%v: flags %x op %x", ack, p.Flags, p.Op)
		}
	}
	b := make([]byte, RTSSize(len(hdr)))
	PutRTS(b, 9, hdr, 1, 1<<40, 77)
	p, err := Parse(b)
	if err != nil || p.Kind != KindRTS || p.Dispatch != 9 || p.Op != 1 || p.Size != 1<<40 || p.Key != 77 || !bytes.Equal(p.Header, hdr) {
		t.Fatalf("RTS: %+v %v", p, err)
	}
	b = make([]byte, ACKSize)
	PutACK(b, 5, StatusDeclined)
	p, err = Parse(b)
	if err != nil || p.Kind != KindACK || p.Op != 5 || p.Status != StatusDeclined {
		t.Fatalf("ACK: %+v %v", p, err)
	}
	b = make([]byte, SENDSize(len(hdr)))
	for _, busy := range []bool{false, true} {
		for _, hold := range []bool{false, true} {
			PutSEND(b, 4, hdr, 8, 1<<30, 99, busy, hold)
			if p, err = Parse(b); err != nil || p.Kind != KindSEND || p.Size != 1<<30 || p.Key != 99 || p.Op != 8 || !bytes.Equal(p.Header, hdr) ||
				(p.Flags&FlagBusy != 0) != busy || (p.Flags&FlagHold != 0) != hold || p.Flags&^(FlagBusy|FlagHold) != 0 {
				t.Fatalf("SEND busy=%v hold=%v: %+v %v", busy, hold, p, err)
			}
		}
	}
	b = make([]byte, GOSize)
	PutGO(b, 8)
	if p, err = Parse(b); err != nil || p.Kind != KindGO || p.Op != 8 || p.Status != 0 {
		t.Fatalf("GO: %+v %v", p, err)
	}
	b = make([]byte, EagerSize(len(data)))
	copy(PutEager(b, 8, 4096), data)
	if p, err = Parse(b); err != nil || p.Kind != KindEAGER || p.Op != 8 || p.Off != 4096 || !bytes.Equal(p.Data, data) {
		t.Fatalf("EAGER: %+v %v", p, err)
	}
	b = make([]byte, STOPSize)
	PutSTOP(b, 8, StopPut, 1234, FromSent)
	if p, err = Parse(b); err != nil || p.Kind != KindSTOP || p.Op != 8 || p.Status != StopPut || p.Key != 1234 || p.Off != FromSent {
		t.Fatalf("STOP: %+v %v", p, err)
	}
	b = make([]byte, CTSSize)
	PutCTS(b, 8, 777)
	if p, err = Parse(b); err != nil || p.Kind != KindCTS || p.Off != 777 {
		t.Fatalf("CTS: %+v %v", p, err)
	}
	entries := make([]byte, 3*MCEntrySize)
	for i := 0; i < 3; i++ {
		PutEntry(entries, i, uint32(i+1), uint32(i), uint64(100+i))
	}
	mc := MC{Op: 11, Size: 1 << 30, Off: 4096, Len: 8192, Key: 42, Status: StatusDeclined, Pos: 2, OriginRank: 5, OriginCtx: 1, Way: 2, Entries: entries}
	b = make([]byte, MCSize(3, len(hdr)))
	PutMC(b, KindMCRTS, 6, hdr, &mc)
	if p, err = Parse(b); err != nil || p.Kind != KindMCRTS || p.Dispatch != 6 || !bytes.Equal(p.Header, hdr) || p.MC.Op != 11 || p.MC.Size != 1<<30 ||
		p.MC.Off != 4096 || p.MC.Len != 8192 || p.MC.Key != 42 || p.MC.Status != StatusDeclined || p.MC.Pos != 2 || p.MC.OriginRank != 5 ||
		p.MC.OriginCtx != 1 || p.MC.Way != 2 || p.MC.NumEntries() != 3 {
		t.Fatalf("MCRTS: %+v %v", p, err)
	}
	if r, c, k := p.MC.Entry(2); r != 3 || c != 2 || k != 102 {
		t.Fatalf("entry 2: %d %d %d", r, c, k)
	}
	b = make([]byte, MCSize(0, 0))
	PutMC(b, KindMCDONE, 0, nil, &MC{Op: 3})
	if p, err = Parse(b); err != nil || p.Kind != KindMCDONE || p.Op != 3 {
		t.Fatalf("MCDONE: %+v %v", p, err)
	}
	b = make([]byte, FINSize)
	PutFIN(b, 8, StatusRemoteIO2)
	if p, err = Parse(b); err != nil || p.Kind != KindFIN || p.Status != StatusRemoteIO2 {
		t.Fatalf("FIN: %+v %v", p, err)
	}
	acks := []ACKEntry{{Op: 1<<32 | 7, Status: StatusOK}, {Op: 9, Status: StatusRemoteIO}, {Op: ^uint64(0), Status: StatusClosed}}
	b = make([]byte, ACKSSize(len(acks)))
	PutACKS(b, acks)
	if p, err = Parse(b); err != nil || p.Kind != KindACKS || p.Op != 0 || len(p.Data) != len(acks)*ACKEntrySize {
		t.Fatalf("ACKS: %+v %v", p, err)
	}
	for i, a := range acks {
		if op, st := ACKAt(p.Data, i); op != a.Op || st != a.Status {
			t.Fatalf("ACKS entry %d: %x %d, want %x %d", i, op, st, a.Op, a.Status)
		}
	}
	// Empty AM.
	b = make([]byte, AMSize(0, 0, false))
	PutAM(b, 0, nil, nil, false, 0)
	if p, err := Parse(b); err != nil || len(p.Header) != 0 || len(p.Data) != 0 {
		t.Fatalf("empty AM: %+v %v", p, err)
	}
}

func TestParseRejects(t *testing.T) {
	good := make([]byte, ACKSize)
	PutACK(good, 1, StatusOK)
	cases := map[string][]byte{
		"short":           {1, 0, 0},
		"kind 0":          {0, 0, 0, 0, 0, 0, 0, 0},
		"kind 200":        {200, 0, 0, 0, 0, 0, 0, 0},
		"unknown flag":    {1, 0x80, 0, 0, 0, 0, 0, 0},
		"reserved":        {1, 0, 0, 0, 0, 0, 1, 0},
		"header past end": {1, 0, 0, 0, 9, 0, 0, 0, 1},
		"ack no op":       {1, 1, 0, 0, 0, 0, 0, 0, 1, 2},
		"rts short":       {2, 0, 0, 0, 0, 0, 0, 0, 1},
		"ack long":        append(append([]byte{}, good...), 0),
		"ack status":      func() []byte { b := make([]byte, ACKSize); PutACK(b, 1, 99); return b }(),
		// FlagBusy belongs to a SEND alone.
		"busy am":  {1, FlagBusy, 0, 0, 0, 0, 0, 0, 1},
		"busy rts": func() []byte { b := make([]byte, RTSSize(0)); PutRTS(b, 1, nil, 1, 2, 3); b[1] = FlagBusy; return b }(),
		"busy ack": func() []byte { b := make([]byte, ACKSize); PutACK(b, 1, 0); b[1] = FlagBusy; return b }(),
		// FlagHold too; a GO carries no status and is ACKSize long.
		"hold am":   {1, FlagHold, 0, 0, 0, 0, 0, 0, 1},
		"hold rts":  func() []byte { b := make([]byte, RTSSize(0)); PutRTS(b, 1, nil, 1, 2, 3); b[1] = FlagHold; return b }(),
		"hold go":   func() []byte { b := make([]byte, GOSize); PutGO(b, 1); b[1] = FlagHold; return b }(),
		"go status": func() []byte { b := make([]byte, GOSize); PutGO(b, 1); b[16] = 1; return b }(),
		"go long":   func() []byte { b := make([]byte, GOSize+8); PutGO(b, 1); return b }(),
		"go short":  func() []byte { b := make([]byte, GOSize); PutGO(b, 1); return b[:GOSize-4] }(),
		"go zero":   func() []byte { b := make([]byte, GOSize); PutGO(b, 1); b[20] = 1; return b }(),
		// ACKS: a count that is not the packet's, none, too many, a
		// status no sender writes, the zero word set.
		"acks long":   append(acksOf(2), 0),
		"acks short":  acksOf(2)[:ACKSSize(2)-1],
		"acks count":  func() []byte { b := acksOf(2); b[8] = 3; return b }(),
		"acks none":   acksOf(0),
		"acks many":   acksOf(MaxACKS + 1),
		"acks status": func() []byte { b := acksOf(3); b[16+2*ACKEntrySize+8] = 99; return b }(),
		"acks zero":   func() []byte { b := acksOf(1); b[12] = 1; return b }(),
		"acks flags":  func() []byte { b := acksOf(1); b[1] = FlagBusy; return b }(),
	}
	for name, b := range cases {
		if _, err := Parse(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err %v", name, err)
		}
		var p Packet
		if err := ParseInto(&p, b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: ParseInto: err %v", name, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	b := make([]byte, AMSize(3, 5, true))
	PutAM(b, 1, []byte("abc"), []byte("12345"), true, 42)
	f.Add(b)
	b = make([]byte, RTSSize(4))
	PutRTS(b, 2, []byte("wxyz"), 1, 2, 3)
	f.Add(b)
	b = make([]byte, ACKSize)
	PutACK(b, 9, StatusTooSmall)
	f.Add(b)
	b = make([]byte, EagerSize(5))
	copy(PutEager(b, 3, 4096), "hello")
	f.Add(b)
	b = make([]byte, STOPSize)
	PutSTOP(b, 3, StopPut, 77, FromSent)
	f.Add(b)
	b = make([]byte, CTSSize)
	PutCTS(b, 3, 12345)
	f.Add(b)
	b = make([]byte, SENDSize(2))
	PutSEND(b, 5, []byte("hh"), 3, 1<<20, 77, true, true)
	f.Add(b)
	b = make([]byte, GOSize)
	PutGO(b, 3)
	f.Add(b)
	entries := make([]byte, 2*MCEntrySize)
	PutEntry(entries, 0, 1, 0, 5)
	PutEntry(entries, 1, 2, 0, 6)
	mc := MC{Op: 1, Size: 2, Off: 3, Len: 4, Key: 5, Pos: 1, OriginRank: 7, Way: 1, Entries: entries}
	b = make([]byte, MCSize(2, 3))
	PutMC(b, KindMCRTS, 4, []byte("hdr"), &mc)
	f.Add(b)
	b = make([]byte, AMSize(2, 8, false))
	PutAM(b, 1023, []byte("hh"), []byte("12345678"), false, 0)
	f.Add(b)
	b = make([]byte, AMSize(0, 0, false))
	PutAM(b, 0, nil, nil, false, 0)
	f.Add(b)
	f.Add(amRecord(7, nil, []byte("12345678")))
	f.Add(amRecord(7, []byte("hdr"), []byte("data")))
	f.Add(acksOf(1))
	f.Add(acksOf(3))
	stale := Packet{Kind: KindRTS, Size: 99, Key: 98, Off: 97, Status: 3, Header: []byte("old")}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse(b)
		// ParseInto agrees with Parse on everything that matters for the
		// kind, whatever the Packet held before.
		q := stale
		qerr := ParseInto(&q, b)
		if (err == nil) != (qerr == nil) {
			t.Fatalf("Parse: %v, ParseInto: %v", err, qerr)
		}
		if err == nil {
			if p.Kind == KindAM {
				if q.Kind != p.Kind || q.Flags != p.Flags || q.Dispatch != p.Dispatch || q.Op != p.Op ||
					!bytes.Equal(q.Header, p.Header) || !bytes.Equal(q.Data, p.Data) {
					t.Fatalf("ParseInto %+v, Parse %+v", q, p)
				}
			} else if !reflect.DeepEqual(q, p) {
				t.Fatalf("ParseInto %+v, Parse %+v", q, p)
			}
		}
		// ParseAM takes exactly the AMs without FlagAck, and agrees.
		d, hdr, data, ok := ParseAM(b)
		if ok != (err == nil && p.Kind == KindAM && p.Flags == 0) {
			t.Fatalf("ParseAM ok=%v, Parse %+v, %v", ok, p, err)
		}
		if ok && (d != p.Dispatch || !bytes.Equal(hdr, p.Header) || !bytes.Equal(data, p.Data) || cap(hdr) != len(hdr)) {
			t.Fatalf("ParseAM %d %q %q, Parse %+v", d, hdr, data, p)
		}
		if err != nil {
			return
		}
		// What decodes must encode back to the same bytes.
		var out []byte
		switch p.Kind {
		case KindAM:
			if binary.LittleEndian.Uint16(b[6:]) != 0 {
				out = amRecord(p.Dispatch, p.Header, p.Data)
				break
			}
			out = make([]byte, AMSize(len(p.Header), len(p.Data), p.Flags&FlagAck != 0))
			PutAM(out, p.Dispatch, p.Header, p.Data, p.Flags&FlagAck != 0, p.Op)
		case KindRTS:
			out = make([]byte, RTSSize(len(p.Header)))
			PutRTS(out, p.Dispatch, p.Header, p.Op, p.Size, p.Key)
		case KindSEND:
			out = make([]byte, SENDSize(len(p.Header)))
			PutSEND(out, p.Dispatch, p.Header, p.Op, p.Size, p.Key, p.Flags&FlagBusy != 0, p.Flags&FlagHold != 0)
		case KindACK:
			out = make([]byte, ACKSize)
			PutACK(out, p.Op, p.Status)
		case KindFIN:
			out = make([]byte, FINSize)
			PutFIN(out, p.Op, p.Status)
		case KindGO:
			out = make([]byte, GOSize)
			PutGO(out, p.Op)
		case KindEAGER:
			out = make([]byte, EagerSize(len(p.Data)))
			copy(PutEager(out, p.Op, p.Off), p.Data)
		case KindSTOP:
			out = make([]byte, STOPSize)
			PutSTOP(out, p.Op, p.Status, p.Key, p.Off)
		case KindCTS:
			out = make([]byte, CTSSize)
			PutCTS(out, p.Op, p.Off)
		case KindACKS:
			acks := make([]ACKEntry, len(p.Data)/ACKEntrySize)
			for i := range acks {
				acks[i].Op, acks[i].Status = ACKAt(p.Data, i)
			}
			out = make([]byte, ACKSSize(len(acks)))
			PutACKS(out, acks)
		case KindMCRTS, KindMCCTS, KindMCGO, KindMCDATA, KindMCDONE, KindMCABORT, KindMCFAIL:
			out = make([]byte, MCSize(p.MC.NumEntries(), len(p.Header)))
			PutMC(out, p.Kind, p.Dispatch, p.Header, &p.MC)
		default:
			t.Fatalf("accepted kind %v", p.Kind)
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("re-encoding differs:\n in %x\nout %x", b, out)
		}
	})
}

// acksOf returns an ACKS packet of n entries (n may be out of range).
func acksOf(n int) []byte {
	acks := make([]ACKEntry, n)
	for i := range acks {
		acks[i] = ACKEntry{Op: uint64(i + 1), Status: uint32(i) % (statusMax + 1)}
	}
	b := make([]byte, ACKSSize(n))
	PutACKS(b, acks)
	return b
}

// amRecord returns the AM PutAMRecord encodes, its base header in front.
func amRecord(d uint16, header, data []byte) []byte {
	b := make([]byte, BaseSize+len(header)+len(data))
	binary.LittleEndian.PutUint64(b, PutAMRecord(b[BaseSize:], d, header, data))
	return b
}

// An AM whose base header carries its length (PutAMRecord) decodes as the
// same AM without it; a length that is not the packet's, or one on an AM
// that asks for an acknowledgement, is malformed.
func TestAMRecord(t *testing.T) {
	cases := []struct{ hdr, data string }{{"", "12345678"}, {"hdr", "data"}, {"", ""}, {"h", ""}, {"h", "12345678"}}
	// Data of 7 to 17 bytes with no header: the copy by two overlapping
	// words (8 to 16), and either side of it.
	for n := 7; n <= 17; n++ {
		cases = append(cases, struct{ hdr, data string }{"", "abcdefghijklmnopq"[:n]})
	}
	for _, c := range cases {
		b := amRecord(513, []byte(c.hdr), []byte(c.data))
		plain := make([]byte, AMSize(len(c.hdr), len(c.data), false))
		PutAM(plain, 513, []byte(c.hdr), []byte(c.data), false, 0)
		if !bytes.Equal(b[BaseSize:], plain[BaseSize:]) || !bytes.Equal(b[:6], plain[:6]) ||
			int(binary.LittleEndian.Uint16(b[6:])) != len(b)-BaseSize {
			t.Fatalf("%q %q: %x, plain %x", c.hdr, c.data, b, plain)
		}
		p, err := Parse(b)
		if err != nil || p.Kind != KindAM || p.Dispatch != 513 || string(p.Header) != c.hdr || string(p.Data) != c.data {
			t.Fatalf("%q %q: Parse %+v, %v", c.hdr, c.data, p, err)
		}
		d, hdr, data, ok := ParseAM(b)
		if !ok || d != 513 || string(hdr) != c.hdr || string(data) != c.data {
			t.Fatalf("%q %q: ParseAM %d %q %q %v", c.hdr, c.data, d, hdr, data, ok)
		}
		if len(b) == BaseSize {
			continue // length 0: no length given
		}
		long := append(append([]byte{}, b...), 0)
		acked := append([]byte{}, b...)
		acked[1] = FlagAck
		for name, bad := range map[string][]byte{"longer": long, "shorter": b[:len(b)-1], "ack": acked} {
			if _, err := Parse(bad); !errors.Is(err, ErrMalformed) {
				t.Errorf("%q %q %s: Parse %v", c.hdr, c.data, name, err)
			}
			var q Packet
			if err := ParseInto(&q, bad); !errors.Is(err, ErrMalformed) {
				t.Errorf("%q %q %s: ParseInto %v", c.hdr, c.data, name, err)
			}
			if _, _, _, ok := ParseAM(bad); ok {
				t.Errorf("%q %q %s: ParseAM accepted it", c.hdr, c.data, name)
			}
		}
	}
}

func TestPutAMRecordAllocs(t *testing.T) {
	b := make([]byte, 8)
	data := []byte("12345678")
	if n := testing.AllocsPerRun(100, func() { PutAMRecord(b, 1, nil, data) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}
