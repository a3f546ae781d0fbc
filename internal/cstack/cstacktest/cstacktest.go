// Package cstacktest has C functions for package cstack's tests, which
// cannot use cgo themselves (a package with Go assembly cannot).
package cstacktest

/*
#include <stdint.h>
#include <string.h>

// Add1 returns *p + 1.
static int64_t add1(int64_t *p) { return *p + 1; }

// Align returns the offset from 16-byte alignment of a local the compiler
// placed at an aligned offset: non-zero where the stack came misaligned.
static int64_t align(int64_t *p) {
	volatile char x[16] __attribute__((aligned(16)));
	uintptr_t a = (uintptr_t)x;
	x[0] = (char)*p;
	__asm__("" : "+r"(a)); // the compiler may not assume the alignment
	return (int64_t)(a & 15);
}

// Deep fills *p bytes of its stack and returns their sum: a function that
// uses much of the stack it runs on.
static int64_t deep(int64_t *p) {
	volatile unsigned char buf[200 << 10];
	int64_t n = *p, s = 0;
	if (n > (int64_t)sizeof buf) n = sizeof buf;
	for (int64_t i = 0; i < n; i++) buf[i] = (unsigned char)i;
	for (int64_t i = 0; i < n; i++) s += buf[i];
	return s;
}

// Spin loops *p times and returns the count of its loops.
static int64_t spin(int64_t *p) {
	volatile int64_t k = 0;
	for (int64_t i = 0; i < *p; i++) k++;
	return k;
}

static uintptr_t fn(int which) {
	switch (which) {
	case 0: return (uintptr_t)add1;
	case 1: return (uintptr_t)align;
	case 2: return (uintptr_t)deep;
	default: return (uintptr_t)spin;
	}
}
*/
import "C"

// The addresses of the C functions, each taking a pointer to an int64.
var (
	Add1  = uintptr(C.fn(0))
	Align = uintptr(C.fn(1))
	Deep  = uintptr(C.fn(2))
	Spin  = uintptr(C.fn(3))
)
