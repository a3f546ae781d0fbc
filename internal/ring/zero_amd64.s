#include "textflag.h"

// func zeroWords(p unsafe.Pointer, n uintptr)
//
// Stores a zero word at p, p+64, ... (n words), the loop starting at a
// 64-byte boundary (see zero_amd64.go).
TEXT ·zeroWords(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), DI
	MOVQ n+8(FP), CX
	TESTQ CX, CX
	JEQ done
	XORL AX, AX
	PCALIGN $64
loop:
	MOVQ AX, (DI)
	ADDQ $64, DI
	DECQ CX
	JNE loop
done:
	RET

