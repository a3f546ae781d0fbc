//go:build amd64 && !race

#include "textflag.h"

// relaxed is an atomic.Bool: its word is at offset 0. A MOVL of it is an
// atomic load on amd64.

// func Store64(p *atomic.Uint64, v uint64)
TEXT ·Store64(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), AX
	MOVQ v+8(FP), BX
	MOVL ·relaxed(SB), CX
	TESTL CX, CX
	JEQ fenced
	MOVQ BX, 0(AX)
	RET
fenced:
	XCHGQ BX, 0(AX)
	RET

// func Store32(p *atomic.Int32, v int32)
TEXT ·Store32(SB), NOSPLIT, $0-12
	MOVQ p+0(FP), AX
	MOVL v+8(FP), BX
	MOVL ·relaxed(SB), CX
	TESTL CX, CX
	JEQ fenced
	MOVL BX, 0(AX)
	RET
fenced:
	XCHGL BX, 0(AX)
	RET
