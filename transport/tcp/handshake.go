package tcp

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/amigo-hpc/amigo/internal/ring"
	"github.com/amigo-hpc/amigo/transport"
)

// The handshake proves, before either side reads anything else, that both
// ends of a connection hold the job's secret, without sending it: a mutual
// challenge-response with HMAC-SHA256 under a key derived from the secret.
//
//	initiator → target   hello   (helloSize bytes)
//	    magic "AMIGOTCP", version u16, zero u16, ring slots u32,
//	    from rank u32, from context u32, to rank u32, to context u32,
//	    job tag [8], initiator nonce [32]
//	target → initiator   answer  (answerSize bytes)
//	    magic "AMIGOTCP", version u16, zero [6],
//	    target nonce [32], target proof [32]
//	initiator → target   proof   (proofSize bytes)
//	    initiator proof [32]
//	target → initiator   verdict (verdictSize bytes)
//	    status u8, zero [7]
//
// A verdict other than verdictOK ends the connection. verdictReverse is no
// refusal: the target is connecting to the initiator's context itself, and
// its connection is to carry the initiator's link too (one connection per
// pair of contexts; see port.admitLocked).
//
// With k = HMAC(secret, "amigo tcp key v1"):
//
//	job tag          = HMAC(k, "amigo tcp job tag")[:8]
//	target proof     = HMAC(k, "amigo tcp target" || hello || target nonce)
//	initiator proof  = HMAC(k, "amigo tcp initiator" || hello || target nonce || target proof)
//
// The job tag lets the target tell a peer of another job (or with another
// secret) from a forgery; it reveals nothing of the secret. Each proof covers
// both nonces and both addresses under a label of its own, so no answer can be
// reflected, redirected or replayed: the target's nonce is fresh for every
// connection. The target also remembers recent initiator nonces and refuses a
// hello it has seen, so a replay is named as such in its log.
const (
	handshakeVersion = 1
	helloSize        = 72
	answerSize       = 80
	proofSize        = 32
	verdictSize      = 8
	nonceSize        = 32
)

var magic = [8]byte{'A', 'M', 'I', 'G', 'O', 'T', 'C', 'P'}

// Verdicts.
const (
	verdictOK        uint8 = 0
	verdictNoContext uint8 = 1 // no such context at the target
	verdictDuplicate uint8 = 2 // the link already has a connection
	verdictClosed    uint8 = 3 // the target is closing
	// verdictReverse: the target is connecting to the initiator itself
	// and its connection wins (one connection per pair of contexts): the
	// initiator's link is to take that connection once it arrives.
	verdictReverse uint8 = 4
	verdictMax           = verdictReverse
)

// errReverse is what initiate and respond return for verdictReverse.
var errReverse = errors.New("tcp: the target's own connection carries the link")

// Reasons a handshake fails. A HandshakeError wraps one of them.
var (
	// ErrStranger: the other end does not speak amigo's handshake.
	ErrStranger = errors.New("not an amigo peer")
	// ErrWrongSecret: the other end belongs to another job, or holds
	// another secret.
	ErrWrongSecret = errors.New("wrong job secret")
	// ErrReplay: a hello seen before.
	ErrReplay = errors.New("replayed handshake")
	// ErrBadProof: a proof that does not verify.
	ErrBadProof = errors.New("proof does not verify")
	// ErrMisdirected: a hello addressed to another rank.
	ErrMisdirected = errors.New("addressed to another rank")
	// ErrRefused: the target refused the link after the proofs.
	ErrRefused = errors.New("refused by the target")
)

// HandshakeError describes a failed handshake.
type HandshakeError struct {
	Remote string // the other end's network address
	Err    error  // one of the reasons above, or an I/O error
	Detail string
}

func (e *HandshakeError) Error() string {
	s := fmt.Sprintf("handshake with %s: %v", e.Remote, e.Err)
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	return s
}

func (e *HandshakeError) Unwrap() error { return e.Err }

// keys are the keys derived from a job's secret.
type keys struct {
	mac [32]byte
	tag [8]byte
}

func deriveKeys(secret []byte) keys {
	var k keys
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("amigo tcp key v1"))
	copy(k.mac[:], m.Sum(nil))
	m = hmac.New(sha256.New, k.mac[:])
	m.Write([]byte("amigo tcp job tag"))
	copy(k.tag[:], m.Sum(nil))
	return k
}

func (k *keys) sum(label string, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, k.mac[:])
	m.Write([]byte(label))
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// hello is the initiator's first message.
type hello struct {
	version   uint16
	ringSlots uint32
	from, to  transport.Addr
	tag       [8]byte
	nonce     [nonceSize]byte
}

func (h *hello) append(b []byte) []byte {
	b = append(b, magic[:]...)
	b = binary.LittleEndian.AppendUint16(b, h.version)
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint32(b, h.ringSlots)
	b = binary.LittleEndian.AppendUint32(b, uint32(h.from.Rank))
	b = binary.LittleEndian.AppendUint32(b, uint32(h.from.Context))
	b = binary.LittleEndian.AppendUint32(b, uint32(h.to.Rank))
	b = binary.LittleEndian.AppendUint32(b, uint32(h.to.Context))
	b = append(b, h.tag[:]...)
	return append(b, h.nonce[:]...)
}

// parseHello decodes a hello. It checks the form only; the tag and the nonce
// are checked by the target.
func parseHello(b []byte) (hello, error) {
	var h hello
	if len(b) < helloSize {
		return h, fmt.Errorf("%w: hello of %d bytes", ErrStranger, len(b))
	}
	if [8]byte(b[:8]) != magic {
		return h, fmt.Errorf("%w: bad magic %q", ErrStranger, b[:8])
	}
	h.version = binary.LittleEndian.Uint16(b[8:])
	if h.version != handshakeVersion {
		return h, fmt.Errorf("%w: handshake version %d, want %d", ErrStranger, h.version, handshakeVersion)
	}
	if binary.LittleEndian.Uint16(b[10:]) != 0 {
		return h, fmt.Errorf("%w: reserved field set", ErrStranger)
	}
	h.ringSlots = binary.LittleEndian.Uint32(b[12:])
	h.from.Rank = int32(binary.LittleEndian.Uint32(b[16:]))
	h.from.Context = int32(binary.LittleEndian.Uint32(b[20:]))
	h.to.Rank = int32(binary.LittleEndian.Uint32(b[24:]))
	h.to.Context = int32(binary.LittleEndian.Uint32(b[28:]))
	copy(h.tag[:], b[32:40])
	copy(h.nonce[:], b[40:72])
	if h.ringSlots < 2 || h.ringSlots > ring.MaxSlots || h.ringSlots&(h.ringSlots-1) != 0 {
		return h, fmt.Errorf("%w: ring of %d slots", ErrStranger, h.ringSlots)
	}
	if h.from.Rank < 0 || h.from.Context < 0 || h.to.Rank < 0 || h.to.Context < 0 || h.from.Context > maxContexts || h.to.Context > maxContexts {
		return h, fmt.Errorf("%w: addresses %v → %v", ErrStranger, h.from, h.to)
	}
	return h, nil
}

// answer is the target's reply to a hello.
type answer struct {
	nonce [nonceSize]byte
	proof [32]byte
}

func (a *answer) append(b []byte) []byte {
	b = append(b, magic[:]...)
	b = binary.LittleEndian.AppendUint16(b, handshakeVersion)
	b = append(b, 0, 0, 0, 0, 0, 0)
	b = append(b, a.nonce[:]...)
	return append(b, a.proof[:]...)
}

func parseAnswer(b []byte) (answer, error) {
	var a answer
	if len(b) < answerSize {
		return a, fmt.Errorf("%w: answer of %d bytes", ErrStranger, len(b))
	}
	if [8]byte(b[:8]) != magic {
		return a, fmt.Errorf("%w: bad magic %q", ErrStranger, b[:8])
	}
	if v := binary.LittleEndian.Uint16(b[8:]); v != handshakeVersion {
		return a, fmt.Errorf("%w: handshake version %d, want %d", ErrStranger, v, handshakeVersion)
	}
	for _, x := range b[10:16] {
		if x != 0 {
			return a, fmt.Errorf("%w: reserved field set", ErrStranger)
		}
	}
	copy(a.nonce[:], b[16:48])
	copy(a.proof[:], b[48:80])
	return a, nil
}

func parseVerdict(b []byte) (uint8, error) {
	if len(b) < verdictSize {
		return 0, fmt.Errorf("%w: verdict of %d bytes", ErrStranger, len(b))
	}
	for _, x := range b[1:8] {
		if x != 0 {
			return 0, fmt.Errorf("%w: reserved field set in verdict", ErrStranger)
		}
	}
	if b[0] > verdictMax {
		return 0, fmt.Errorf("%w: unknown verdict %d", ErrStranger, b[0])
	}
	return b[0], nil
}

func verdictText(v uint8) string {
	switch v {
	case verdictOK:
		return "accepted"
	case verdictNoContext:
		return "no such context"
	case verdictDuplicate:
		return "the link is already connected"
	case verdictClosed:
		return "the target is closing"
	case verdictReverse:
		return "the target's own connection carries the link"
	}
	return fmt.Sprintf("verdict %d", v)
}

// initiate runs the initiator's side of the handshake on rw, which the caller
// bounds with a deadline. remote names the other end in errors.
func initiate(rw io.ReadWriter, k *keys, h hello, remote string) error {
	fail := func(err error, detail string) error {
		return &HandshakeError{Remote: remote, Err: err, Detail: detail}
	}
	h.version = handshakeVersion
	h.tag = k.tag
	if _, err := rand.Read(h.nonce[:]); err != nil {
		return fail(err, "nonce")
	}
	hb := h.append(make([]byte, 0, helloSize))
	if _, err := rw.Write(hb); err != nil {
		return fail(err, "sending hello")
	}
	var buf [answerSize]byte
	if _, err := io.ReadFull(rw, buf[:]); err != nil {
		return fail(err, "reading the target's answer (a target refuses a wrong secret by closing)")
	}
	a, err := parseAnswer(buf[:])
	if err != nil {
		return fail(err, "")
	}
	want := k.sum("amigo tcp target", hb, a.nonce[:])
	if !hmac.Equal(want, a.proof[:]) {
		return fail(ErrBadProof, "the target does not hold the job's secret")
	}
	proof := k.sum("amigo tcp initiator", hb, a.nonce[:], a.proof[:])
	if _, err := rw.Write(proof); err != nil {
		return fail(err, "sending proof")
	}
	var v [verdictSize]byte
	if _, err := io.ReadFull(rw, v[:]); err != nil {
		return fail(err, "reading the verdict (a target refuses a bad proof by closing)")
	}
	verdict, err := parseVerdict(v[:])
	if err != nil {
		return fail(err, "")
	}
	if verdict == verdictReverse {
		return errReverse
	}
	if verdict != verdictOK {
		return fail(ErrRefused, verdictText(verdict))
	}
	return nil
}

// respond runs the target's side of the handshake on rw, which the caller
// bounds with a deadline. It reads exactly one hello and one proof and
// nothing else. admit decides, once the initiator proved itself, whether the
// link is taken; rank is the target's own rank.
func respond(rw io.ReadWriter, k *keys, rank int, seen *nonceCache, remote string, admit func(hello) uint8) (hello, error) {
	fail := func(err error, detail string) (hello, error) {
		return hello{}, &HandshakeError{Remote: remote, Err: err, Detail: detail}
	}
	var hb [helloSize]byte
	// The magic first, so that a stranger is told from a slow peer at once.
	for got, want := 0, len(magic); got < helloSize; want = helloSize {
		n, err := io.ReadFull(rw, hb[got:want])
		got += n
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				return fail(ErrStranger, fmt.Sprintf("closed after %d of the %d bytes of a hello", got, helloSize))
			}
			return fail(err, fmt.Sprintf("reading hello, %d of %d bytes read", got, helloSize))
		}
		if got == len(magic) && [8]byte(hb[:8]) != magic {
			return fail(ErrStranger, fmt.Sprintf("bad magic %q", hb[:8]))
		}
	}
	h, err := parseHello(hb[:])
	if err != nil {
		return fail(err, "")
	}
	if !hmac.Equal(h.tag[:], k.tag[:]) {
		return fail(ErrWrongSecret, fmt.Sprintf("rank %d context %d of another job, or with another secret", h.from.Rank, h.from.Context))
	}
	if int(h.to.Rank) != rank {
		return fail(ErrMisdirected, fmt.Sprintf("hello for rank %d reached rank %d", h.to.Rank, rank))
	}
	if !seen.add(h.nonce) {
		return fail(ErrReplay, fmt.Sprintf("hello from rank %d context %d seen before", h.from.Rank, h.from.Context))
	}
	var a answer
	if _, err := rand.Read(a.nonce[:]); err != nil {
		return fail(err, "nonce")
	}
	copy(a.proof[:], k.sum("amigo tcp target", hb[:], a.nonce[:]))
	if _, err := rw.Write(a.append(make([]byte, 0, answerSize))); err != nil {
		return fail(err, "sending answer")
	}
	var proof [proofSize]byte
	if _, err := io.ReadFull(rw, proof[:]); err != nil {
		return fail(ErrBadProof, "no proof: "+err.Error())
	}
	want := k.sum("amigo tcp initiator", hb[:], a.nonce[:], a.proof[:])
	if !hmac.Equal(want, proof[:]) {
		return fail(ErrBadProof, fmt.Sprintf("claimed rank %d context %d; a replayed or forged handshake", h.from.Rank, h.from.Context))
	}
	verdict := admit(h)
	var v [verdictSize]byte
	v[0] = verdict
	if _, err := rw.Write(v[:]); err != nil {
		return fail(err, "sending verdict")
	}
	if verdict == verdictReverse {
		return hello{}, errReverse
	}
	if verdict != verdictOK {
		return fail(ErrRefused, verdictText(verdict))
	}
	return h, nil
}

// nonceCache remembers the most recent initiator nonces a target accepted
// hellos with.
type nonceCache struct {
	mu   sync.Mutex
	set  map[[nonceSize]byte]struct{}
	fifo [][nonceSize]byte
	next int
}

const nonceCacheSize = 1 << 14

// add records n and reports whether it was new.
func (c *nonceCache) add(n [nonceSize]byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.set == nil {
		c.set = make(map[[nonceSize]byte]struct{})
	}
	if _, ok := c.set[n]; ok {
		return false
	}
	if len(c.fifo) < nonceCacheSize {
		c.fifo = append(c.fifo, n)
	} else {
		delete(c.set, c.fifo[c.next])
		c.fifo[c.next] = n
		c.next = (c.next + 1) % nonceCacheSize
	}
	c.set[n] = struct{}{}
	return true
}
