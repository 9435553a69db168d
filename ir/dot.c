/* dot.c: a Graphviz digraph of a module: a cluster per function, a node per
 * instruction labelled with its name, op and type, edges from operands to
 * users, and globals as boxes joined to their loads and stores. */
#include <string.h>

#include "ir.h"

/* Contents of a quoted DOT string; control bytes become spaces. */
static void dot_str(FILE *out, const char *s) {
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    if (*p == '"' || *p == '\\')
      fputc('\\', out);
    fputc(*p < 0x20 || *p == 0x7f ? ' ' : *p, out);
  }
}

static void dot_inst(FILE *out, int fi, const Inst *in) {
  char buf[128];
  fprintf(out, "    f%d_%d [label=\"%%", fi, in->id);
  if (in->name)
    dot_str(out, in->name);
  else
    fprintf(out, "%d", in->id);
  fprintf(out, "\\n%s", (unsigned)in->op < OP_COUNT ? ir_ops[in->op].name : "?");
  const char *s = in->op == OP_output ? ir_get_str(in, "name", NULL) : NULL;
  if (s) {
    fputc(' ', out);
    dot_str(out, s);
  }
  if (in->type.dtype != DT_VOID)
    fprintf(out, "\\n%s", type_str(&in->type, buf, sizeof buf));
  fputs("\"];\n", out);
}

void ir_print_dot(FILE *out, const Module *m) {
  static const char *kinds[] = {"input", "param", "buffer", "state"};
  char buf[128];
  fputs("digraph \"", out);
  dot_str(out, m->name);
  fputs("\" {\n  node [fontname=\"monospace\", fontsize=10];\n", out);
  for (int k = 0; k < m->global.n; k++) {
    const Global *g = &m->global.a[k];
    fprintf(out, "  g%d [shape=box, label=\"%s ", k,
            (unsigned)g->kind <= G_STATE ? kinds[g->kind] : "?");
    dot_str(out, g->name);
    fprintf(out, "\\n%s\"];\n", type_str(&g->type, buf, sizeof buf));
  }
  for (int fi = 0; fi < m->func.n; fi++) {
    const Func *f = m->func.a[fi];
    fprintf(out, "  subgraph cluster_%d {\n    label=\"@", fi);
    dot_str(out, f->name);
    fputs("\";\n", out);
    for (int k = 0; k < f->inst.n; k++)
      dot_inst(out, fi, f->inst.a[k]);
    for (int k = 0; k < f->inst.n; k++) {
      const Inst *in = f->inst.a[k];
      for (int j = 0; j < in->nin; j++)
        if (in->in[j] && in->in[j]->fn == f)
          fprintf(out, "    f%d_%d -> f%d_%d;\n", fi, in->in[j]->id, fi, in->id);
    }
    fputs("  }\n", out);
    for (int k = 0; k < f->inst.n; k++) {
      const Inst *in = f->inst.a[k];
      if (in->op != OP_load && in->op != OP_store)
        continue;
      const Global *g = ir_find_global(m, ir_get_str(in, "global", ""));
      if (!g)
        continue;
      int gi = (int)(g - m->global.a);
      if (in->op == OP_load)
        fprintf(out, "  g%d -> f%d_%d;\n", gi, fi, in->id);
      else
        fprintf(out, "  f%d_%d -> g%d;\n", fi, in->id, gi);
    }
  }
  fputs("}\n", out);
}
