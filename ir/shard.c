/* shard.c: what a sharding means on each device: block lengths (even or by
 * ratios, largest remainder), mesh coordinates and groups, a device's block of
 * a tensor. Shared by the passes, the interpreter and code generation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

void ir_blocks(int64_t n, const double *ratio, int k, int64_t *sizes) {
  DTC_ASSERT(k >= 1 && n >= 0);
  if (!ratio) {
    for (int c = 0; c < k; c++)
      sizes[c] = n / k + (c < n % k);
    return;
  }
  double sum = 0;
  for (int c = 0; c < k; c++) {
    DTC_ASSERT(isfinite(ratio[c]) && ratio[c] >= 0);
    sum += ratio[c];
  }
  DTC_ASSERT(sum > 0);
  int64_t total = 0;
  for (int c = 0; c < k; c++) {
    sizes[c] = (int64_t)floor(ratio[c] / sum * (double)n);
    total += sizes[c];
  }
  /* Rounding of the ratios can leave the floors above n as well as below. */
  while (total != n) {
    int best = -1;
    double gap = 0;
    for (int c = 0; c < k; c++) {
      double below = ratio[c] / sum * (double)n - (double)sizes[c];
      if (total < n ? best < 0 || below > gap : sizes[c] > 0 && (best < 0 || below < gap))
        best = c, gap = below;
    }
    sizes[best] += total < n ? 1 : -1;
    total += total < n ? 1 : -1;
  }
}

void ir_shard_whole(Sharding *s) {
  memset(s, 0, sizeof *s);
  memset(s->axis, -1, sizeof s->axis);
}

int ir_placed(const double *ratio, int k) {
  int at = -1;
  for (int c = 0; ratio && c < k; c++) {
    if (ratio[c] == 1 && at < 0)
      at = c;
    else if (ratio[c] != 0)
      return -1;
  }
  return at;
}

int ir_det_pieces(int64_t batch) {
  for (int g = 8; g >= 2; g--)
    if (batch % g == 0)
      return g;
  return 0;
}

void ir_dim_blocks(const Module *m, int64_t n, const double *ratio, int k, int64_t *sizes) {
  int64_t g = m ? m->det_pieces : 0;
  if (g < 2 || n % g) {
    ir_blocks(n, ratio, k, sizes);
    return;
  }
  ir_blocks(g, ratio, k, sizes);
  for (int c = 0; c < k; c++)
    sizes[c] *= n / g;
}

int ir_mesh_devices(const Module *m) {
  int n = 1;
  for (int a = 0; m->mesh.n && a < m->mesh.a[0].naxis; a++)
    n *= m->mesh.a[0].axis_size[a];
  return n;
}

void ir_mesh_coords(const Mesh *mesh, int device, int coord[IR_MAX_MESH_AXES]) {
  for (int a = mesh->naxis - 1; a >= 0; a--) {
    coord[a] = device % mesh->axis_size[a];
    device /= mesh->axis_size[a];
  }
}

void ir_mesh_group(const Mesh *mesh, int device, int axis, int *members) {
  int stride = 1;
  for (int a = mesh->naxis - 1; a > axis; a--)
    stride *= mesh->axis_size[a];
  int coord[IR_MAX_MESH_AXES];
  ir_mesh_coords(mesh, device, coord);
  int first = device - coord[axis] * stride;
  for (int c = 0; c < mesh->axis_size[axis]; c++)
    members[c] = first + c * stride;
}

void ir_local_type(const Module *m, const Sharding *s, const Type *global, int device,
                   Type *local, int64_t *begin) {
  *local = *global;
  for (int d = 0; begin && d < global->rank; d++)
    begin[d] = 0;
  if (!s)
    return;
  const Mesh *mesh = &m->mesh.a[s->mesh];
  int coord[IR_MAX_MESH_AXES];
  ir_mesh_coords(mesh, device, coord);
  for (int d = 0; d < global->rank; d++) {
    int a = s->axis[d];
    if (a < 0)
      continue;
    int k = mesh->axis_size[a];
    int64_t *sizes = malloc(sizeof *sizes * (size_t)k), at = 0;
    DTC_ASSERT(sizes);
    ir_dim_blocks(m, global->dim[d], s->ratio[d], k, sizes);
    for (int c = 0; c < coord[a]; c++)
      at += sizes[c];
    local->dim[d] = sizes[coord[a]];
    if (begin)
      begin[d] = at;
    free(sizes);
  }
}

Type ir_global_type_on(const Module *m, const Global *g, int device) {
  Type t = g->type;
  if (device >= 0 && g->shard)
    ir_local_type(m, g->shard, &g->type, device, &t, NULL);
  return t;
}

unsigned ir_partial_axes(const Module *m, const Sharding *s, int rank) {
  if (!s || !s->partial)
    return 0;
  if (s->partial_axes)
    return s->partial_axes;
  unsigned all = (1u << m->mesh.a[s->mesh].naxis) - 1;
  for (int d = 0; d < rank; d++)
    if (s->axis[d] >= 0)
      all &= ~(1u << s->axis[d]);
  return all;
}

const char *ir_shard_str(const Module *m, const Sharding *s, int rank, char *buf, size_t n) {
  size_t k = 0;
#define PUT(...) (k += (size_t)snprintf(buf + k, k < n ? n - k : 0, __VA_ARGS__))
  const Mesh *mesh = &m->mesh.a[s->mesh];
  PUT("%s[", mesh->name);
  for (int d = 0; d < rank; d++) {
    int a = s->axis[d];
    PUT("%s%s", d ? ", " : "", a < 0 ? "*" : mesh->axis_name[a]);
    for (int c = 0; a >= 0 && s->ratio[d] && c < mesh->axis_size[a]; c++)
      PUT("%s%g", c ? ", " : "(", s->ratio[d][c]);
    if (a >= 0 && s->ratio[d])
      PUT(")");
  }
  PUT("]");
  if (s->partial)
    PUT(" partial");
  for (int a = 0, first = 1; s->partial_axes && a < mesh->naxis; a++)
    if (s->partial_axes & (1u << a)) {
      PUT("%s%s", first ? "(" : ", ", mesh->axis_name[a]);
      first = 0;
    }
  if (s->partial_axes)
    PUT(")");
#undef PUT
  if (k >= n && n > 0)
    buf[n - 1] = 0;
  return buf;
}
