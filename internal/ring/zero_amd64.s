#include "textflag.h"

// func zeroWords(p unsafe.Pointer, n uintptr)
//
// Stores a zero word at p, p+64, ... (n words): eight a pass of the main
// loop, the rest one at a time; each loop starts at a 64-byte boundary
// (see zero_amd64.go).
TEXT ·zeroWords(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), DI
	MOVQ n+8(FP), CX
	XORL AX, AX
	SUBQ $8, CX
	JCS tail
	PCALIGN $64
loop8:
	MOVQ AX, (DI)
	MOVQ AX, 64(DI)
	MOVQ AX, 128(DI)
	MOVQ AX, 192(DI)
	MOVQ AX, 256(DI)
	MOVQ AX, 320(DI)
	MOVQ AX, 384(DI)
	MOVQ AX, 448(DI)
	ADDQ $512, DI
	SUBQ $8, CX
	JCC loop8
tail:
	ADDQ $8, CX
	JEQ done
	PCALIGN $64
loop1:
	MOVQ AX, (DI)
	ADDQ $64, DI
	DECQ CX
	JNE loop1
done:
	RET
