/* fuzz_criteo.c: libFuzzer target: any bytes, as a file of Criteo's text
 * format (plain, or gzip when they start with its magic), read in batches of
 * 1, 3 and 64 lines, give lines whose every id lies in its table, or
 * DT_ERR_FORMAT with "PATH:LINE:" opening the message; never a crash, a
 * leak or a sanitizer report. The bytes go to a memfd, read by its path. */
#define _GNU_SOURCE /* memfd_create */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dtrt.h"

enum { ND = DTRT_CRITEO_DENSE, NC = DTRT_CRITEO_CATS, MAX = 64 };

static float dense[MAX * ND], labels[MAX];
static int32_t ids[MAX * NC];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static DtrtCtx *ctx;
  if (!ctx && !(ctx = dtrt_ctx_new()))
    return 0;
  int fd = memfd_create("criteo", 0);
  if (fd < 0)
    return 0;
  for (size_t at = 0; at < size;) {
    ssize_t w = write(fd, data + at, size - at);
    if (w <= 0) {
      close(fd);
      return 0;
    }
    at += (size_t)w;
  }
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  int64_t rows[NC];
  for (int k = 0; k < NC; k++)
    rows[k] = k < 3 ? k + 1 : 1000 + k;
  const int64_t batch[3] = {1, 3, MAX};
  for (int b = 0; b < 3; b++) {
    DtCriteo *r;
    if (dtrt_criteo_open(ctx, path, rows, &r))
      abort();
    int64_t n;
    DtStatus s;
    while (!(s = dtrt_criteo_read(r, batch[b], dense, ids, labels, &n)) && n)
      for (int64_t i = 0; i < n * NC; i++)
        if (ids[i] < 0 || ids[i] >= rows[i % NC])
          abort();
    const char *m = dtrt_errmsg(ctx);
    size_t len = strlen(path);
    if (s && (s != DT_ERR_FORMAT || strncmp(m, path, len) || m[len] != ':' || m[len + 1] < '1' ||
              m[len + 1] > '9'))
      abort();
    dtrt_criteo_close(r);
  }
  close(fd);
  return 0;
}
