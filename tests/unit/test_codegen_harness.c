/* test_codegen_harness.c: not a test itself. test_codegen_run links it with
 * a model object compiled by dtc (CREATE names the model's NAME_create) and
 * libdtrt, and runs it as: harness IN OUT.
 *
 * IN:  i32 steps, seed-free data for the model:
 *      i32 nfwd_in,   then per input:  i64 elems, elems x 4 bytes
 *      i32 nfwd_out,  then per output: i64 elems
 *      i32 ntrain_in, then per input:  i64 elems, elems x 4 bytes
 *      i32 nglobal,   then per param or state: i32 len, name, i64 elems
 * OUT: the globals as created, the forward outputs, then per training step
 *      the loss (f32) and the globals after it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrt.h"

int CREATE(DtModel **m, uint64_t seed);

static FILE *in, *out;

static void need(int ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "harness: %s\n", what);
    exit(2);
  }
}

static int32_t rd32(void) {
  int32_t v;
  need(fread(&v, 4, 1, in) == 1, "short input");
  return v;
}

static int64_t rd64(void) {
  int64_t v;
  need(fread(&v, 8, 1, in) == 1, "short input");
  return v;
}

/* n buffers, each with its element count, optionally read from IN. */
static void buffers(int n, void **p, int64_t *elems, int with_data) {
  for (int k = 0; k < n; k++) {
    elems[k] = rd64();
    p[k] = calloc((size_t)elems[k] + 1, 4);
    need(p[k] != NULL, "out of memory");
    if (with_data)
      need(fread(p[k], 4, (size_t)elems[k], in) == (size_t)elems[k], "short input");
  }
}

#define COUNT(a) ((int64_t)(sizeof(a) / sizeof((a)[0])))

/* Each global as this rank holds it: its block, then zeros up to the whole
 * tensor's elems[k] (a pipeline stage holds some of a stacked param's
 * layers), so that every rank writes the same layout. */
static void dump(DtModel *m, int n, char **name, const int64_t *elems) {
  static const float zero[256];
  for (int k = 0; k < n; k++) {
    DtTensor t;
    need(dtrt_model_tensor_block(m, name[k], &t, NULL, NULL) == DT_OK, "no such global");
    int64_t have = 1;
    for (int d = 0; d < t.rank; d++)
      have *= t.dim[d];
    need(have <= elems[k], "a block larger than its tensor");
    fwrite(t.data, 4, (size_t)have, out);
    for (int64_t e = have; e < elems[k]; e += COUNT(zero))
      fwrite(zero, 4, (size_t)(elems[k] - e < COUNT(zero) ? elems[k] - e : COUNT(zero)), out);
  }
}

int main(int argc, char **argv) {
  need(argc == 3, "usage: harness IN OUT");
  in = fopen(argv[1], "rb");
  out = fopen(argv[2], "wb");
  need(in && out, "cannot open files");
  int steps = rd32();
  void *fin[64], *fout[64], *tin[64];
  int64_t nfin[64], nfout[64], ntin[64], ng[256];
  char *name[256];
  int nf = rd32();
  need(nf <= 64, "too many inputs");
  buffers(nf, fin, nfin, 1);
  int no = rd32();
  need(no <= 64, "too many outputs");
  buffers(no, fout, nfout, 0);
  int nt = rd32();
  need(nt <= 64, "too many inputs");
  buffers(nt, tin, ntin, 1);
  int n = rd32();
  need(n <= 256, "too many globals");
  for (int k = 0; k < n; k++) {
    int len = rd32();
    name[k] = calloc((size_t)len + 1, 1);
    need(name[k] && fread(name[k], 1, (size_t)len, in) == (size_t)len, "short input");
    ng[k] = rd64();
  }

  DtModel *m;
  int s = CREATE(&m, 42);
  need(s == 0, "create failed");
  dump(m, n, name, ng);
  if ((s = dtrt_model_forward(m, (const void *const *)fin, nfin, fout, nfout))) {
    fprintf(stderr, "harness: forward: %s\n", dtrt_model_error(m));
    dtrt_model_destroy(m);   /* under mpiexec: every rank ends alike */
    return 1;
  }
  for (int k = 0; k < no; k++)
    fwrite(fout[k], 4, (size_t)nfout[k], out);
  for (int i = 0; i < steps; i++) {
    float loss;
    if ((s = dtrt_model_train_step(m, (const void *const *)tin, ntin, &loss))) {
      fprintf(stderr, "harness: train_step: %s\n", dtrt_model_error(m));
      dtrt_model_destroy(m);
      return 1;
    }
    fwrite(&loss, 4, 1, out);
    dump(m, n, name, ng);
  }
  dtrt_model_destroy(m);
  for (int k = 0; k < nf; k++)
    free(fin[k]);
  for (int k = 0; k < no; k++)
    free(fout[k]);
  for (int k = 0; k < nt; k++)
    free(tin[k]);
  for (int k = 0; k < n; k++)
    free(name[k]);
  fclose(in);
  need(fclose(out) == 0, "cannot write output");
  return 0;
}
