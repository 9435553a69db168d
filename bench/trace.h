/* trace.h: libdtrt's kernel times by name, read from the trace
 * (DTRT_TRACE, docs/RUNTIME.md) of a model that took `steps` steps, for
 * the benches that split a step into its parts (gpt, conv). Header only. */
#ifndef TRACE_H
#define TRACE_H

#include <stdio.h>
#include <string.h>

typedef struct Part {
  char name[64];
  double ms; /* per step */
} Part;

/* Kernel time per step by name from the trace at path, at most max names
 * into part; the kernels' total into *total. The number of names. */
static int read_trace(const char *path, int steps, Part *part, int max, double *total) {
  FILE *f = fopen(path, "r");
  int n = 0;
  *total = 0;
  if (!f)
    return 0;
  char line[512], name[64];
  double ts, dur;
  int pid, tid;
  while (fgets(line, sizeof line, f)) {
    if (sscanf(line,
               "{\"name\":\"%63[^\"]\",\"cat\":\"kernel\",\"ph\":\"X\",\"ts\":%lf,"
               "\"dur\":%lf,\"pid\":%d,\"tid\":%d}",
               name, &ts, &dur, &pid, &tid) != 5)
      continue;
    int k = 0;
    while (k < n && strcmp(part[k].name, name))
      k++;
    if (k == n && n < max)
      snprintf(part[n++].name, sizeof part->name, "%s", name);
    if (k < n)
      part[k].ms += dur / 1e3 / steps;
    *total += dur / 1e3 / steps;
  }
  fclose(f);
  return n;
}

/* For qsort: the longest first. */
static int part_by_ms(const void *a, const void *b) {
  double x = ((const Part *)a)->ms, y = ((const Part *)b)->ms;
  return (x < y) - (x > y);
}

#endif
