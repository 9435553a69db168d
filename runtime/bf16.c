/* bf16.c: the bfloat16 wire format of the summing collectives: rounding an
 * f32 to bf16 (to nearest, ties to even) and back, packing buffers, and the
 * MPI datatype and reduction (unpack, add in f32, round) that let MPI's own
 * collectives sum bf16 values. */
#include <string.h>

#include "dtrt_int.h"

uint16_t dtrt_bf16_from_f32(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep the sign and the top of
                                           the payload, set the quiet bit */
    return (uint16_t)(u >> 16 | 0x40u);
  /* adding half a unit of the kept part, less one when the kept part is even,
   * carries into it exactly when rounding to nearest-even goes up (a carry
   * out of the mantissa raises the exponent, up to inf) */
  u += 0x7fffu + (u >> 16 & 1u);
  return (uint16_t)(u >> 16);
}

float dtrt_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

void dtrt_bf16_pack(const float *x, uint16_t *h, int64_t n) {
  for (int64_t j = 0; j < n; j++)
    h[j] = dtrt_bf16_from_f32(x[j]);
}

void dtrt_bf16_unpack(const uint16_t *h, float *x, int64_t n) {
  for (int64_t j = 0; j < n; j++)
    x[j] = dtrt_bf16_to_f32(h[j]);
}

/* MPI_User_function of the bf16 sum: inout[j] = bf16(in[j] + inout[j]), the
 * addition in f32. Commutative; like any rounded sum, not associative. */
static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
  (void)type;
  const uint16_t *a = in;
  uint16_t *b = inout;
  for (int j = 0; j < *len; j++)
    b[j] = dtrt_bf16_from_f32(dtrt_bf16_to_f32(a[j]) + dtrt_bf16_to_f32(b[j]));
}

int dtrt_bf16_mpi_new(MPI_Datatype *type, MPI_Op *sum) {
  int err = MPI_Type_contiguous(2, MPI_BYTE, type);
  if (err == MPI_SUCCESS && (err = MPI_Type_commit(type)) != MPI_SUCCESS)
    MPI_Type_free(type);
  if (err == MPI_SUCCESS && (err = MPI_Op_create(bf16_sum, 1, sum)) != MPI_SUCCESS)
    MPI_Type_free(type);
  return err;
}
