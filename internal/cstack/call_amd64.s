//go:build linux

#include "textflag.h"

// func call(fn, arg, stack uintptr) uintptr
//
// The System V convention: the argument in DI, the result in AX, the
// stack 16-byte aligned at the CALL; C preserves BX, BP, R12-R15 (R14
// holds g, R15 the GOT base), and Go's wrapper around an ABI0 function
// restores the registers ABIInternal assumes (X15 zero) after it. The old
// stack pointer is kept on the new stack, under an 8-byte pad that keeps
// the alignment. Not NOSPLIT: the assembler's stack check at the entry
// is where a preemption the runtime asked for happens.
TEXT ·call(SB), $0-32
	MOVQ fn+0(FP), AX
	MOVQ arg+8(FP), DI
	MOVQ stack+16(FP), CX
	MOVQ SP, DX
	MOVQ CX, SP
	PUSHQ DX
	SUBQ $8, SP
	CALL AX
	ADDQ $8, SP
	POPQ DX
	MOVQ DX, SP
	MOVQ AX, ret+24(FP)
	RET
