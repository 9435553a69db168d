/* frontend.h: from .dt source to a Module (docs/LANGUAGE.md describes the
 * language). */
#ifndef DTC_FRONTEND_H
#define DTC_FRONTEND_H

#include "ir.h"

/* Parses and checks a .dt file (following imports), lowers it to a Module.
 * defs: "NAME=VALUE" strings from -D. NULL after reporting errors to d. */
Module *fe_compile(Arena *a, const SrcFile *src, const char *const *defs, int ndefs, Diag *d);

/* For --cluster FILE: the one cluster block of src and its imports. NULL after
 * reporting errors to d. */
Cluster *fe_cluster(Arena *a, const SrcFile *src, Diag *d);

/* fe_compile planned against cluster c (from fe_cluster) instead of the one
 * the parallel block names: its meshes are resolved against c. Without a
 * parallel block, c becomes the module's cluster with plan auto and no mesh. */
Module *fe_compile_on(Arena *a, const SrcFile *src, const char *const *defs, int ndefs,
                      Cluster *c, Diag *d);

/* fe_compile_on (c NULL: the parallel block's cluster) with the parallel
 * block's mesh resized to `devices` (> 0; dtc --devices): its one axis of
 * that size, over the first `devices` devices it lists (the cluster's first,
 * when it lists none). A program without a parallel block, a block of two
 * meshes or a mesh of two axes, ratios written in the block, or more devices
 * than the mesh lists or the cluster has: a diagnostic. */
Module *fe_compile_for(Arena *a, const SrcFile *src, const char *const *defs, int ndefs,
                       Cluster *c, int devices, Diag *d);

#endif
