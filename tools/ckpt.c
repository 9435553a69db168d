/* ckpt.c: dtc-ckpt, the checkpoint tool: lists what a checkpoint holds,
 * verifies its checksum, makes one checkpoint of the per-rank files of
 * earlier versions, and a checkpoint of step 0 of PyTorch's weights
 * (docs/RUNTIME.md, "Checkpoints", "Weights from PyTorch"). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "dtrt.h"

static const char usage[] =
    "usage: dtc-ckpt list FILE\n"
    "       dtc-ckpt verify FILE\n"
    "       dtc-ckpt convert OUT PATH.rank0 PATH.rank1 ...\n"
    "       dtc-ckpt import OUT TEMPLATE WEIGHTS\n"
    "\n"
    "list     prints the tensors of a checkpoint (name, dtype, shape, bytes), its\n"
    "         step, model, model hash, params hash and the plan it was saved from\n"
    "verify   checks a checkpoint's form and checksum: exit status 0 when it is\n"
    "         whole, 1 with a message otherwise\n"
    "convert  writes OUT, one checkpoint of whole tensors, from the per-rank files\n"
    "         of one save by an earlier version (every rank's file, in any order)\n"
    "import   writes OUT, a checkpoint of step 0 of the model TEMPLATE is a\n"
    "         checkpoint of (NAME_save after NAME_create): its params read by name\n"
    "         from WEIGHTS, a plain safetensors file (PyTorch's), its optimizer\n"
    "         state zero\n";

/* The length of the UTF-8 character at s that may be printed as it is (not
 * a C1 control, nor one that reorders text), or 0. */
static int printable_utf8(const unsigned char *s) {
  int n = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
  if (!n || s[0] > 0xf4)
    return 0;
  unsigned cp = s[0] & (0x7fu >> n);
  for (int k = 1; k < n; k++) {
    if ((s[k] & 0xc0) != 0x80)
      return 0;
    cp = cp << 6 | (s[k] & 0x3fu);
  }
  static const unsigned least[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < least[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) || cp < 0xa0 ||
      (cp >= 0x200b && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202e) ||
      (cp >= 0x2066 && cp <= 0x2069) || cp == 0xfeff)
    return 0;
  return n;
}

/* Text of a file (or a message quoting one) printed so that it cannot make
 * lines of its own nor drive the terminal: control characters and bytes
 * that are not UTF-8 as C escapes (\n, \x1b); NULL as "(none)". Padded
 * with spaces to width characters. */
static void put_text(FILE *out, const char *text, int width) {
  const unsigned char *s = (const unsigned char *)(text ? text : "(none)");
  int col = 0;
  while (*s) {
    int n = printable_utf8(s);
    if (n) {
      fwrite(s, 1, (size_t)n, out);
      s += n, col++;
      continue;
    }
    const char *e = *s == '\n' ? "\\n" : *s == '\t' ? "\\t" : *s == '\r' ? "\\r" : NULL;
    if (e)
      col += fprintf(out, "%s", e);
    else if (*s < 0x20 || *s >= 0x7f)
      col += fprintf(out, "\\x%02x", *s);
    else
      putc(*s, out), col++;
    s++;
  }
  for (; col < width; col++)
    putc(' ', out);
}

/* dtc-ckpt: and the context's message, escaped (it quotes the file). */
static void put_error(DtrtCtx *ctx) {
  fputs("dtc-ckpt: ", stderr);
  put_text(stderr, ctx ? dtrt_errmsg(ctx) : "out of memory", 0);
  putc('\n', stderr);
}

/* The header of path as JSON (NULL with a message on stderr). */
static cJSON *read_header(const char *path) {
  FILE *f = fopen(path, "rb");
  unsigned char len8[8];
  if (!f) {
    fprintf(stderr, "dtc-ckpt: cannot open %s: %s\n", path, strerror(errno));
    return NULL;
  }
  uint64_t hl = 0;
  bool ok = fread(len8, 1, 8, f) == 8;
  for (int k = 0; ok && k < 8; k++)
    hl |= (uint64_t)len8[k] << 8 * k;
  char *text = ok && hl > 1 && hl <= (100u << 20) ? malloc(hl + 1) : NULL;
  ok = text && fread(text, 1, hl, f) == hl;
  fclose(f);
  cJSON *root = ok ? cJSON_ParseWithLength(text, hl) : NULL;
  free(text);
  if (!cJSON_IsObject(root)) {
    fprintf(stderr, "dtc-ckpt: %s: not a safetensors file (no JSON header)\n", path);
    cJSON_Delete(root);
    return NULL;
  }
  return root;
}

static const char *meta(const cJSON *root, const char *key) {
  const cJSON *j =
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "__metadata__"), key);
  return cJSON_IsString(j) ? j->valuestring : NULL;
}

/* Tensors in data order. */
static int by_offset(const void *a, const void *b) {
  const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
  double ox = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(x, "data_offsets"), 0)
                  ->valuedouble;
  double oy = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(y, "data_offsets"), 0)
                  ->valuedouble;
  return ox < oy ? -1 : ox > oy;
}

static int list(const char *path) {
  DtrtCtx *ctx = dtrt_ctx_new();
  int64_t step = 0;
  DtStatus s = ctx ? dtrt_ckpt_verify(ctx, path, &step) : DT_ERR_NOMEM;
  if (s) {
    put_error(ctx);
    dtrt_ctx_free(ctx);
    return 1;
  }
  dtrt_ctx_free(ctx);
  cJSON *root = read_header(path);
  if (!root)
    return 1;
  const char *ph = meta(root, "params_hash");
  static const char *const keys[] = {"format", "model", "model_hash", "params_hash", "checksum"};
  static const char *const labels[] = {"format      ", "model       ", "model hash  ",
                                       "params hash ", "checksum    "};
  fputs("file        ", stdout);
  put_text(stdout, path, 0);
  for (int k = 0; k < 5; k++) {
    printf("\n%s", labels[k]);
    put_text(stdout, k == 3 && !ph ? "(not recorded)" : meta(root, keys[k]), 0);
    if (k == 1)
      printf("\nstep        %lld", (long long)step);
  }
  fputs("\nplan        ", stdout);
  const char *plan = meta(root, "plan");
  for (const char *p = plan; p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
    size_t len = strcspn(p, "\n");
    char *line = malloc(len + 1);
    if (!line)
      break;
    memcpy(line, p, len);
    line[len] = 0;
    fputs(p == plan ? "" : "\n            ", stdout);
    put_text(stdout, line, 0);
    free(line);
  }
  int n = 0;
  const cJSON **t = malloc(sizeof *t * (size_t)(cJSON_GetArraySize(root) + 1));
  for (const cJSON *j = root->child; t && j; j = j->next)
    if (strcmp(j->string, "__metadata__"))
      t[n++] = j;
  qsort(t, (size_t)n, sizeof *t, by_offset);
  printf("\ntensors     %d\n", n);
  double total = 0;
  for (int k = 0; k < n; k++) {
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(t[k], "data_offsets");
    double bytes = cJSON_GetArrayItem(off, 1)->valuedouble - cJSON_GetArrayItem(off, 0)->valuedouble;
    char *shape = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(t[k], "shape"));
    fputs("  ", stdout);
    put_text(stdout, t[k]->string, 24);
    printf(" %s %-16s %12.0f bytes\n",
           cJSON_GetObjectItemCaseSensitive(t[k], "dtype")->valuestring, shape ? shape : "?",
           bytes);
    cJSON_free(shape);
    total += bytes;
  }
  printf("data        %.0f bytes\n", total);
  free(t);
  cJSON_Delete(root);
  return 0;
}

static int verify(const char *path) {
  DtrtCtx *ctx = dtrt_ctx_new();
  int64_t step = 0;
  DtStatus s = ctx ? dtrt_ckpt_verify(ctx, path, &step) : DT_ERR_NOMEM;
  if (s)
    put_error(ctx);
  else
    printf("%s: ok, step %lld\n", path, (long long)step);
  dtrt_ctx_free(ctx);
  return s ? 1 : 0;
}

static int convert(const char *out, const char *const *files, int n) {
  DtrtCtx *ctx = dtrt_ctx_new();
  DtStatus s = ctx ? dtrt_ckpt_convert(ctx, out, files, n) : DT_ERR_NOMEM;
  if (s)
    put_error(ctx);
  else
    printf("%s: one checkpoint of %d per-rank file%s\n", out, n, n == 1 ? "" : "s");
  dtrt_ctx_free(ctx);
  return s ? 1 : 0;
}

static int import(const char *out, const char *tmpl, const char *weights) {
  DtrtCtx *ctx = dtrt_ctx_new();
  DtStatus s = ctx ? dtrt_ckpt_import(ctx, out, tmpl, weights) : DT_ERR_NOMEM;
  if (s)
    put_error(ctx);
  else
    printf("%s: step 0 of %s's model, params of %s\n", out, tmpl, weights);
  dtrt_ctx_free(ctx);
  return s ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    fputs(usage, stdout);
    return 0;
  }
  if (argc == 3 && !strcmp(argv[1], "list"))
    return list(argv[2]);
  if (argc == 3 && !strcmp(argv[1], "verify"))
    return verify(argv[2]);
  if (argc >= 4 && !strcmp(argv[1], "convert"))
    return convert(argv[2], (const char *const *)argv + 3, argc - 3);
  if (argc == 5 && !strcmp(argv[1], "import"))
    return import(argv[2], argv[3], argv[4]);
  fputs(usage, stderr);
  return 2;
}
