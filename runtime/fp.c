/* fp.c: the floating-point mode generated code and libdtrt's kernels run in.
 * A step flushes denormals to zero (results) and reads denormal operands as
 * zero: on x86-64 MXCSR's FTZ and DAZ bits, on aarch64 FPCR.FZ (which does
 * both for single and double precision). Arithmetic that makes or reads
 * denormals runs tens of times slower on many cores (a 512-bit FMA 77-95x on
 * an Emerald Rapids), and a trained network's small gradients and moments
 * make them all the time. The mode is per thread: dtrt_model_train_step and
 * dtrt_model_forward set it for the step and restore the caller's after, and
 * the pool's workers take the caller's mode with each job. The mode is the
 * control word without the exception flags, which the step leaves raised. */
#include "dtrt_int.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
/* MXCSR: FTZ (bit 15) | DAZ (bit 6); bits 0-5 are the exception flags,
 * which are status, not mode */
enum { FLUSH_BITS = 0x8040, FLAGS = 0x3f };
uint64_t dtrt_fp_mode(void) { return _mm_getcsr() & ~(unsigned)FLAGS; }
void dtrt_fp_set_mode(uint64_t mode) {
  _mm_setcsr((_mm_getcsr() & FLAGS) | ((unsigned)mode & ~(unsigned)FLAGS));
}
#elif defined(__aarch64__)
enum { FLUSH_BITS = 1 << 24 }; /* FPCR.FZ (the flags are FPSR's) */
uint64_t dtrt_fp_mode(void) {
  uint64_t v;
  __asm__ volatile("mrs %0, fpcr" : "=r"(v));
  return v;
}
void dtrt_fp_set_mode(uint64_t mode) { __asm__ volatile("msr fpcr, %0" : : "r"(mode)); }
#else
enum { FLUSH_BITS = 0 }; /* no mode to set: IEEE denormals */
uint64_t dtrt_fp_mode(void) { return 0; }
void dtrt_fp_set_mode(uint64_t mode) { (void)mode; }
#endif

uint64_t dtrt_fp_enter(int denormals) {
  uint64_t saved = dtrt_fp_mode();
  uint64_t mode = denormals == DT_DENORMALS_IEEE ? saved & ~(uint64_t)FLUSH_BITS
                                                 : saved | FLUSH_BITS;
  if (mode != saved)
    dtrt_fp_set_mode(mode);
  return saved;
}

void dtrt_fp_leave(uint64_t saved) {
  if (dtrt_fp_mode() != saved)
    dtrt_fp_set_mode(saved);
}
