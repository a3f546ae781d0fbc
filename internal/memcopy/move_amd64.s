#include "textflag.h"

// func repMovsb(dst, src unsafe.Pointer, n uintptr)
TEXT ·repMovsb(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	CLD
	REP; MOVSB
	RET

// COPY128 copies the 128 bytes at SI+AX to DI+AX through Y0-Y3.
#define COPY128 \
	VMOVDQU 0(SI)(AX*1), Y0 \
	VMOVDQU 32(SI)(AX*1), Y1 \
	VMOVDQU 64(SI)(AX*1), Y2 \
	VMOVDQU 96(SI)(AX*1), Y3 \
	VMOVDQU Y0, 0(DI)(AX*1) \
	VMOVDQU Y1, 32(DI)(AX*1) \
	VMOVDQU Y2, 64(DI)(AX*1) \
	VMOVDQU Y3, 96(DI)(AX*1) \
	ADDQ $128, AX

// func copyAhead(dst, src unsafe.Pointer, n, pf uintptr)
//
// Copies n bytes, a multiple of 128, 128 bytes an iteration with 32-byte
// vector loads and stores, and during the first pf bytes of it (pf <= n,
// a multiple of 128) asks for the two lines AheadDist (4096) bytes past
// the iteration's source (PREFETCHT0). Two loops, so that the one without
// prefetches makes no test for them (one loop testing each iteration
// measured the same, within the noise).
TEXT ·copyAhead(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ pf+24(FP), DX
	XORQ AX, AX
ahead:
	CMPQ AX, DX
	JAE plain
	PREFETCHT0 4096(SI)(AX*1)
	PREFETCHT0 4160(SI)(AX*1)
	COPY128
	JMP ahead
plain:
	CMPQ AX, CX
	JAE done
	COPY128
	JMP plain
done:
	VZEROUPPER
	RET
