/* test_codegen.c: fusion groups, the memory plan's invariants, properties of
 * the generated LLVM IR, target and CPU checks, objects for another
 * architecture, and the generated header under C and C++ compilers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_codegen.h"

/* x[4,8] @ w[8,16] + b[16] -> relu -> output h */
static Inst *bias_relu(CT *t) {
  Inst *x = ct_global(t, "x", G_INPUT, ty(DT_F32, 2, 4, 8), NULL);
  Inst *w = ct_global(t, "w", G_PARAM, ty(DT_F32, 2, 8, 16), "glorot");
  Inst *b = ct_global(t, "b", G_PARAM, ty(DT_F32, 1, 16), "zeros");
  Inst *mm = ct_op(t, OP_matmul, 2, x, w);
  Inst *h = ct_op(t, OP_relu, 1, ct_op(t, OP_add, 2, mm, b));
  ct_output(t, h, "h");
  return h;
}

/* A small classifier: x[6,5] -> 7 relu -> 3 logits, cross entropy with y. */
static void classifier(CT *t, const char *opt) {
  Inst *x = ct_global(t, "x", G_INPUT, ty(DT_F32, 2, 6, 5), NULL);
  Inst *y = ct_global(t, "y", G_INPUT, ty(DT_I32, 1, 6), NULL);
  Inst *w1 = ct_global(t, "w1", G_PARAM, ty(DT_F32, 2, 5, 7), "glorot");
  Inst *b1 = ct_global(t, "b1", G_PARAM, ty(DT_F32, 1, 7), "zeros");
  Inst *w2 = ct_global(t, "w2", G_PARAM, ty(DT_F32, 2, 7, 3), "glorot");
  Inst *b2 = ct_global(t, "b2", G_PARAM, ty(DT_F32, 1, 3), "zeros");
  Inst *h = ct_op(t, OP_relu, 1, ct_op(t, OP_add, 2, ct_op(t, OP_matmul, 2, x, w1), b1));
  Inst *logits = ct_op(t, OP_add, 2, ct_op(t, OP_matmul, 2, h, w2), b2);
  ct_output(t, logits, "logits");
  ct_output(t, ct_op(t, OP_cross_entropy, 2, logits, y), "loss");
  ct_train(t, opt, 0.1);
}

static Inst *find_op(Func *f, Op op, int nth) {
  for (int i = 0; i < f->inst.n; i++)
    if (f->inst.a[i]->op == op && nth-- == 0)
      return f->inst.a[i];
  return NULL;
}

static void fusion_bias_relu(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "br");
  Inst *h = bias_relu(&t);
  ct_passes(&t);
  Inst *mm = find_op(t.f, OP_matmul, 0), *add = find_op(t.f, OP_add, 0);
  assert_int_equal(mm->fuse, 0);
  assert_true(add->fuse > 0);
  assert_int_equal(h->fuse, add->fuse);
  assert_int_equal(add->offset, -1);     /* used only inside its group */
  assert_int_equal(h->offset, -1);       /* written straight to the output */
  assert_true(mm->offset >= 0);
  for (int i = 0; i < t.f->inst.n; i++)
    if (t.f->inst.a[i]->op == OP_load)
      assert_int_equal(t.f->inst.a[i]->offset, -1);
  ct_check_groups(t.f);
  ct_check_plan(t.f);
  ct_free(&t);
}

/* A group read by a kernel takes no more members; chains of the same shape
 * merge; a smaller shape stays apart. */
static void fusion_seal_merge_shape(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "sm");
  Inst *x = ct_global(&t, "x", G_INPUT, ty(DT_F32, 2, 3, 4), NULL);
  Inst *y = ct_global(&t, "y", G_INPUT, ty(DT_F32, 2, 3, 4), NULL);
  Inst *b = ct_global(&t, "b", G_INPUT, ty(DT_F32, 1, 4), NULL);
  Inst *e = ct_op(&t, OP_exp, 1, x);
  Inst *s = ct_new(&t, OP_sum, 1, e);
  int64_t ax[] = {1};
  ir_set_ints(s, "axes", ax, 1);
  ir_finish(s);
  Inst *after = ct_op(&t, OP_mul, 2, e, ct_const(&t, 2));   /* e was read by sum */
  Inst *p = ct_op(&t, OP_mul, 2, y, ct_const(&t, 3));
  Inst *q = ct_op(&t, OP_neg, 1, y);
  Inst *pq = ct_op(&t, OP_add, 2, p, q);                     /* merges p's and q's */
  Inst *small = ct_op(&t, OP_tanh, 1, b);
  Inst *big = ct_op(&t, OP_add, 2, pq, small);
  Inst *all = ct_op(&t, OP_add, 2, after, big);
  ct_output(&t, all, "out");
  ct_output(&t, s, "s");
  ct_passes(&t);
  ct_check_groups(t.f);
  ct_check_plan(t.f);
  assert_true(e->fuse > 0);
  assert_int_not_equal(after->fuse, e->fuse);
  assert_true(e->offset >= 0);
  assert_int_equal(p->fuse, q->fuse);
  assert_int_equal(pq->fuse, p->fuse);
  assert_int_equal(big->fuse, p->fuse);
  assert_int_not_equal(small->fuse, big->fuse);
  assert_true(small->offset >= 0);
  assert_int_equal(pq->offset, -1);
  ct_free(&t);
}

/* The update of a param is one loop writing into the state block; its load
 * is no copy. */
static void fusion_store_in_place(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "cl");
  classifier(&t, "sgd");
  ct_passes(&t);
  Func *f = ir_find_func(t.m, "train_step");
  ct_check_groups(f);
  ct_check_plan(f);
  ct_check_plan(t.f);
  int stores = 0;
  for (int i = 0; i < f->inst.n; i++) {
    Inst *x = f->inst.a[i];
    if (x->op == OP_store) {
      stores++;
      assert_true(x->fuse > 0);
      assert_int_equal(x->in[0]->fuse, x->fuse);
    }
    if (x->op == OP_load)
      assert_int_equal(x->offset, -1);
  }
  assert_int_equal(stores, 8);
  ct_free(&t);
}

/* Input x[2,3] and param w[3,3] loaded in @forward, half = w * 0.5 and a
 * store of half to w; returns the store. */
static Inst *store_half(CT *t, Inst **x, Inst **w, Inst **half) {
  *x = ct_global(t, "x", G_INPUT, ty(DT_F32, 2, 2, 3), NULL);
  *w = ct_global(t, "w", G_PARAM, ty(DT_F32, 2, 3, 3), "glorot");
  *half = ct_op(t, OP_mul, 2, *w, ct_const(t, 0.5));
  Inst *st = ir_new(t->f, OP_store, (Loc){0}, 1, half);
  ir_set_str(st, "global", "w");
  return ir_finish(st);
}

/* A store whose global's old value is read later waits for that read: it
 * leaves its group and moves after the reader, and the load stays an alias. */
static void fusion_store_waits(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "sw");
  Inst *x, *w, *half, *st = store_half(&t, &x, &w, &half);
  Inst *mm = ct_op(&t, OP_matmul, 2, x, w);
  ct_output(&t, mm, "y");
  ct_passes(&t);
  ct_check_plan(t.f);
  assert_int_equal(st->fuse, 0);
  assert_true(st->id > mm->id);
  assert_true(half->offset >= 0);
  assert_int_equal(w->offset, -1);
  ct_free(&t);
}

/* A load whose value is read after a store to its global (which cannot move,
 * because a later load needs the new value) is a copy. */
static void memplan_copies_load(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "cp");
  Inst *x, *w, *half;
  store_half(&t, &x, &w, &half);
  Inst *w2 = ct_load(&t, t.f, "w");
  ct_output(&t, ct_op(&t, OP_matmul, 2, x, w), "old");
  ct_output(&t, ct_op(&t, OP_matmul, 2, x, w2), "new");
  ct_passes(&t);
  ct_check_plan(t.f);
  assert_true(w->offset >= 0);
  assert_int_equal(w2->offset, -1);
  ct_free(&t);
}

static void memplan_reuses(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "ru");
  Inst *x = ct_global(&t, "x", G_INPUT, ty(DT_F32, 2, 16, 16), NULL);
  Inst *v = x;
  for (int k = 0; k < 6; k++)
    v = ct_op(&t, OP_softmax, 1, v);
  Inst *s = ct_new(&t, OP_sum, 1, v);
  int64_t ax[] = {0, 1};
  ir_set_ints(s, "axes", ax, 2);
  ct_output(&t, ir_finish(s), "s");
  ct_passes(&t);
  ct_check_plan(t.f);
  /* a chain needs two live buffers at a time, not six */
  assert_int_equal(t.f->work_bytes, 2 * 16 * 16 * 4);
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  memplan_report(out, t.m);
  fclose(out);
  assert_non_null(strstr(text, "@forward: work arena 2.0 KiB"));
  assert_non_null(strstr(text, "6 buffers"));
  free(text);
  ct_free(&t);
}

static void ir_has(const char *ir, const char *what) {
  if (!strstr(ir, what))
    fail_msg("generated LLVM IR lacks '%s'", what);
}

static void llvm_ir_properties(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "cl");
  classifier(&t, "sgd");
  t.m->train.schedule = DT_SCHED_COSINE;   /* the schedule's arg, min_lr, after total */
  t.m->train.total = 100;
  t.m->train.min_lr = 0.05;
  ct_passes(&t);
  const char *path = ct_emit(&t, "llvm", "x86_64-unknown-linux-gnu", "x86-64", 0);
  assert_non_null(path);
  char *ir = ct_read(path, NULL);
  assert_non_null(ir);
  ir_has(ir, "!\"llvm.loop.vectorize.enable\", i1 true");
  ir_has(ir, "@llvm.fmuladd.f32(");
  ir_has(ir, "call i32 @dtc.gemm_serial.x86-64(");
  ir_has(ir, "call i32 @dtrt_k_cross_entropy_grad(");
  ir_has(ir, "\"denormal-fp-math\"=\"preserve-sign,preserve-sign\"");
  ir_has(ir, "call float @dtrt_step_lr(");
  ir_has(ir, "i32 2, double 1.000000e-01, i64 0, i64 100, double 5.000000e-02, double 0.000000e+00, "
             "double 0.000000e+00, i64");
  ir_has(ir, "define internal i32 @cl.train_step(");
  ir_has(ir, "define i32 @cl_train_step(ptr %0, ptr %1, i64 %2, ptr %3, i64 %4, ptr %5)");
  ir_has(ir, "define i32 @cl_forward(ptr %0, ptr %1, i64 %2, ptr %3, i64 %4)");
  ir_has(ir, "define void @cl_destroy(");
  free(ir);

  ct_free(&t);

  /* the bias-add and relu loop of a larger layer is vectorised at -O2 */
  ct_init(&t, "big");
  Inst *x = ct_global(&t, "x", G_INPUT, ty(DT_F32, 2, 32, 64), NULL);
  Inst *w = ct_global(&t, "w", G_PARAM, ty(DT_F32, 2, 64, 256), "glorot");
  Inst *b = ct_global(&t, "b", G_PARAM, ty(DT_F32, 1, 256), "zeros");
  ct_output(&t, ct_op(&t, OP_relu, 1, ct_op(&t, OP_add, 2, ct_op(&t, OP_matmul, 2, x, w), b)), "h");
  ct_passes(&t);
  path = ct_emit(&t, "llvm", "x86_64-unknown-linux-gnu", "x86-64", 2);
  assert_non_null(path);
  ir = ct_read(path, NULL);
  ir_has(ir, "fadd <4 x float>");
  ir_has(ir, "llvm.loop.isvectorized");
  if (strstr(ir, "dtrt_parallel_for"))
    fail_msg("a group of 8192 elements is not worth threads");
  free(ir);
  ct_free(&t);

  /* a product's epilogue is a function the GEMM calls on C's strips */
  ct_init(&t, "ep");
  x = ct_global(&t, "x", G_INPUT, ty(DT_F32, 2, 256, 64), NULL);
  w = ct_global(&t, "w", G_PARAM, ty(DT_F32, 2, 64, 256), "glorot");
  b = ct_global(&t, "b", G_PARAM, ty(DT_F32, 1, 256), "zeros");
  ct_output(&t, ct_op(&t, OP_relu, 1, ct_op(&t, OP_add, 2, ct_op(&t, OP_matmul, 2, x, w), b)), "h");
  t.m->epilogues = true;   /* dtc -fepilogue */
  ct_passes(&t);
  assert_int_equal(find_op(t.f, OP_matmul, 0)->fuse, find_op(t.f, OP_relu, 0)->fuse);
  path = ct_emit(&t, "llvm", "x86_64-unknown-linux-gnu", "x86-64", 2);
  assert_non_null(path);
  ir = ct_read(path, NULL);
  ir_has(ir, "define internal void @ep.tiles0(ptr");
  ir_has(ir, "store ptr @ep.tiles0, ptr");   /* into the GEMM's environment */
  if (strstr(ir, "@ep.par") || strstr(ir, "@ep.loop"))
    fail_msg("the epilogue also ran as a loop of its own");
  free(ir);
  ct_free(&t);

  /* a group of 65536 elements or more runs on the context's threads: its
   * nest is outlined and handed to dtrt_parallel_for */
  ct_init(&t, "lg");
  x = ct_global(&t, "x", G_INPUT, ty(DT_F32, 2, 256, 256), NULL);
  b = ct_global(&t, "b", G_PARAM, ty(DT_F32, 1, 256), "zeros");
  ct_output(&t, ct_op(&t, OP_relu, 1, ct_op(&t, OP_add, 2, x, b)), "h");
  ct_passes(&t);
  path = ct_emit(&t, "llvm", "x86_64-unknown-linux-gnu", "x86-64", 2);
  assert_non_null(path);
  ir = ct_read(path, NULL);
  ir_has(ir, "call void @dtrt_parallel_for(ptr %ctx, i64 256, ptr @lg.par0,");
  ir_has(ir, "define internal void @lg.par0(");
  ir_has(ir, "fadd <4 x float>");
  free(ir);
  ct_free(&t);
}

static void run_check(CT *t, const char *target, const char *cpu, const char *want) {
  CgOptions o = {.emit = "obj", .target = target, .cpu = cpu, .opt_level = 2};
  bool ok = cg_check_target(&o, &t->d);
  if (!want) {
    assert_true(ok);
    assert_string_equal(ct_log(t), "");
  } else {
    assert_false(ok);
    if (!strstr(ct_log(t), want))
      fail_msg("expected '%s' in: %s", want, ct_log(t));
  }
}

static void target_checks(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "tg");
  run_check(&t, NULL, NULL, NULL);
  run_check(&t, "aarch64-unknown-linux-gnu", "cortex-a72", NULL);
  run_check(&t, "x86_64-unknown-linux-gnu", "skylake", NULL);
  ct_free(&t);

  /* each refusal on a fresh log */
  static const struct {
    const char *target, *cpu, *want;
  } bad[] = {
      {"sparc-sun-solaris", NULL, "dtc: error: unknown target 'sparc-sun-solaris'"},
      {"x86_64-unknown-linux-gnu", "foo",
       "dtc: error: unknown CPU 'foo' for target x86_64-unknown-linux-gnu\n"},
      {"aarch64-unknown-linux-gnu", "skylake",
       "dtc: error: unknown CPU 'skylake' for target aarch64-unknown-linux-gnu\n"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    ct_init(&t, "tg");
    run_check(&t, bad[k].target, bad[k].cpu, bad[k].want);
    ct_free(&t);
  }
}

static void aarch64_object(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "ar");
  classifier(&t, "adam");
  ct_passes(&t);
  const char *path = ct_emit(&t, "obj", "aarch64-unknown-linux-gnu", NULL, 2);
  assert_non_null(path);
  size_t len;
  unsigned char *elf = (unsigned char *)ct_read(path, &len);
  assert_non_null(elf);
  assert_true(len > 64);
  assert_memory_equal(elf, "\177ELF", 4);
  assert_int_equal(elf[18] | elf[19] << 8, 183);   /* EM_AARCH64 */
  free(elf);
  ct_free(&t);
}

/* The header compiles as C and C++ without a warning, and its macros hold
 * the shapes; names that are keywords or clash get a suffix. */
static void header_compiles(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "hd");
  Inst *x = ct_global(&t, "class", G_INPUT, ty(DT_F32, 2, 4, 3), NULL);
  Inst *m = ct_global(&t, "m", G_INPUT, ty(DT_I32, 1, 4), NULL);
  Inst *w = ct_global(&t, "w", G_PARAM, ty(DT_F32, 2, 3, 2), "glorot");
  Inst *logits = ct_op(&t, OP_matmul, 2, x, w);
  ct_output(&t, logits, "w");
  ct_output(&t, ct_op(&t, OP_cross_entropy, 2, logits, m), "loss");
  ct_train(&t, "adam", 0.01);
  ct_passes(&t);
  assert_non_null(ct_emit(&t, "obj", NULL, NULL, 1));
  FILE *f = fopen(arena_printf(t.a, "%s/use.c", t.dir), "w");
  assert_non_null(f);
  fputs("#include \"hd.h\"\n"
        "static const long long dims[] = HD_CLASS_DIMS;\n"
        "typedef char elems_ok[HD_CLASS_ELEMS == 12 && HD_M_RANK == 1 && HD_W_DIM1 == 2 &&\n"
        "                      HD_W_OUT_ELEMS == 8 && HD_BATCH == 4 ? 1 : -1];\n"
        "int use(hd *p, const float *c, int64_t nc, const int32_t *l, int64_t nl);\n"
        "int use(hd *p, const float *c, int64_t nc, const int32_t *l, int64_t nl) {\n"
        "  float loss, out[8];\n"
        "  (void)l, (void)nl;\n"
        "  return (int)dims[0] + hd_train_step(p, c, nc, l, nl, &loss) +\n"
        "         hd_forward(p, c, nc, out, 8) + (int)hd_step(p) + (hd_error(p) ? 0 : 1);\n"
        "}\n",
        f);
  fclose(f);
  const char *flags = "-Wall -Wextra -Werror -pedantic -fsyntax-only";
  assert_int_equal(ct_sh("cd %s && %s -std=c99 %s use.c", t.dir, DTC_TEST_CC, flags), 0);
  assert_int_equal(ct_sh("cd %s && %s -std=c11 %s use.c", t.dir, DTC_TEST_CC, flags), 0);
  if (DTC_TEST_CXX[0])
    assert_int_equal(ct_sh("cd %s && %s -std=c++11 %s -x c++ use.c", t.dir, DTC_TEST_CXX, flags), 0);
  char *h = ct_read(arena_printf(t.a, "%s/hd.h", t.dir), NULL);
  assert_non_null(strstr(h, "int hd_train_step(hd *m, const float *class_, int64_t class__elems, "
                            "const int32_t *m_, int64_t m__elems, float *loss);"));
  free(h);
  ct_free(&t);
}

static void bad_model_name(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "my-model");
  bias_relu(&t);
  ct_passes(&t);
  assert_null(ct_emit(&t, "llvm", NULL, NULL, 0));
  assert_non_null(strstr(ct_log(&t), "dtc: error: model name 'my-model' cannot name C functions"));
  ct_free(&t);
}

/* The model hash in the code is ir_hash of the module's whole text without
 * locations, though the text streams past the hash in pieces: here a
 * module's text many pipe buffers long. */
static void model_hash_whole_text(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "hashed");
  Inst *h = ct_global(&t, "x", G_INPUT, ty(DT_F32, 2, 4, 8), NULL);
  for (int k = 0; k < 3000; k++)
    h = ct_op(&t, OP_tanh, 1, ct_op(&t, OP_mul, 2, h, ct_const(&t, 1.01)));
  ct_output(&t, h, "h");
  ct_passes(&t);
  size_t n;
  char *text = ir_string_of(ir_print_structure, t.m, &n);
  assert_true(n > 4 * 65536);
  char want[64];
  snprintf(want, sizeof want, "c\"%016llx\\00\"", (unsigned long long)ir_hash(text, n));
  free(text);
  const char *path = ct_emit(&t, "llvm", NULL, NULL, 0);
  assert_non_null(path);
  char *ir = ct_read(path, NULL);
  ir_has(ir, want);
  free(ir);
  ct_free(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(fusion_bias_relu),     cmocka_unit_test(fusion_seal_merge_shape),
      cmocka_unit_test(fusion_store_in_place), cmocka_unit_test(fusion_store_waits),
      cmocka_unit_test(memplan_copies_load),  cmocka_unit_test(memplan_reuses),
      cmocka_unit_test(llvm_ir_properties),   cmocka_unit_test(target_checks),
      cmocka_unit_test(aarch64_object),       cmocka_unit_test(header_compiles),
      cmocka_unit_test(bad_model_name),       cmocka_unit_test(model_hash_whole_text),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
