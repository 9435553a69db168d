/* test_ir_parse.c: the IR parser's diagnostics, as text with line and column,
 * its recovery after errors, and its limits on garbage and huge inputs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ir.h"
#include "ir_arena_test.h"

typedef struct Result {
  Module *m;
  int nerr;
  char *msg;   /* all diagnostics */
} Result;

/* Parses len bytes (NULs allowed) named t.ir. */
static Result parse_bytes(const char *text, size_t len) {
  Result r = {0};
  size_t n;
  FILE *f = open_memstream(&r.msg, &n);
  Diag d;
  diag_init(&d, f);
  char *copy = arena_strndup(arena, text, len);
  SrcFile src = {"t.ir", copy, len, false};
  r.m = ir_parse(arena, &src, &d);
  r.nerr = d.nerr;
  fclose(f);
  return r;
}

static Result parse(const char *text) { return parse_bytes(text, strlen(text)); }

/* The first diagnostic line is exactly `want`, and there are nerr errors. */
static void expect_errors(const char *text, int nerr, const char *want) {
  Result r = parse(text);
  char *nl = strchr(r.msg, '\n');
  size_t len = nl ? (size_t)(nl - r.msg) : strlen(r.msg);
  if (r.m || r.nerr != nerr || len != strlen(want) || strncmp(r.msg, want, len))
    fail_msg("for:\n%s\nwanted %d error(s), first:\n%s\ngot %d:\n%s", text, nerr, want, r.nerr,
             r.msg);
  free(r.msg);
}

static void expect_error(const char *text, const char *want) { expect_errors(text, 1, want); }

#define HEAD "module m\ninput a : f32[2,3]\nfunc @f {\n  %a = load {global = \"a\"} : f32[2,3]\n"

static void test_start(void **state) {
  (void)state;
  expect_error("", "t.ir:1:1: error: expected 'module NAME' to start the IR text, found end of file");
  expect_errors("\n\n  func", 2, "t.ir:3:3: error: expected 'module NAME' to start the IR text, found 'func'");
  expect_error("module\n", "t.ir:1:7: error: expected a module name, found end of line");
  expect_error("module m n\n", "t.ir:1:10: error: expected end of line, found 'n'");
  expect_error("module m\nmodule n\n", "t.ir:2:1: error: a file holds one module");
  expect_error("module m\nfoo\n",
               "t.ir:2:1: error: expected a declaration (dim, cluster, mesh, plan, deterministic, "
               "exchange, shard_state, attention, train, input, param, buffer, state, func), "
               "found 'foo'");
  expect_error("module m\nexchange fp8\n", "t.ir:2:10: error: expected 'f32', 'bf16' or 'auto', found 'fp8'");
  expect_error("module m\nexchange bf16\nexchange bf16\n",
               "t.ir:3:1: error: a module has one exchange line");
  expect_error("module m\nshard_state dp\n",
               "t.ir:2:13: error: expected an axis of the mesh declared before, or none, found 'dp'");
}

/* The deterministic line and the pieces attribute of deterministic mode. */
static void test_deterministic(void **state) {
  (void)state;
  expect_error("module m\ndeterministic 1 batch 4\n",
               "t.ir:2:15: error: a piece count must be between 2 and 256");
  expect_error("module m\ndeterministic 3 batch 4\n",
               "t.ir:2:23: error: a batch of 4 rows is not 3 equal pieces");
  expect_error("module m\ndeterministic 2 rows 4\n", "t.ir:2:17: error: expected 'batch', found 'rows'");
  expect_error("module m\ndeterministic 2 batch 4\ndeterministic 2 batch 4\n",
               "t.ir:3:1: error: a module has one deterministic line");
  const char *head = "module m\ninput x: f32[4,3]\nfunc @f {\n  %x = load {global = \"x\"} : f32[4,3]\n";
  char buf[512];
  snprintf(buf, sizeof buf, "%s  %%s = sum %%x {axes = [0], pieces = [0, 3]} : f32[1,3]\n}\n", head);
  expect_error(buf, "t.ir:5:8: error: 'sum': pieces entry 0 (operand 0 in blocks of 3 rows) does "
                    "not cut an operand's dim 0 into whole blocks");
  snprintf(buf, sizeof buf, "%s  %%s = sum %%x {axes = [0], pieces = [1, 2]} : f32[2,3]\n}\n", head);
  expect_error(buf, "t.ir:5:8: error: 'sum': pieces entry 0 (operand 1 in blocks of 2 rows) does "
                    "not cut an operand's dim 0 into whole blocks");
  snprintf(buf, sizeof buf, "%s  %%s = sum %%x {axes = [0], pieces = 2} : f32[2,3]\n}\n", head);
  expect_error(buf, "t.ir:5:28: error: attribute 'pieces' must be ints, not int");
  snprintf(buf, sizeof buf, "%s  %%s = sum %%x {axes = [0], pieces = [0, 2]} : f32[2,3]\n"
                            "  %%f = fold %%s : f32[3]\n}\n", head);
  Result r = parse(buf);
  assert_non_null(r.m);
  free(r.msg);
}

static void test_lexical(void **state) {
  (void)state;
  expect_error("module m\ndim B = 4 $\n", "t.ir:2:11: error: unexpected character '$'");
  expect_error("module m\ndim B = 4\n\x01", "t.ir:3:1: error: unexpected byte 0x01");
  Result r = parse_bytes("module m\n\0\n", 11);
  assert_null(r.m);
  assert_non_null(strstr(r.msg, "t.ir:2:1: error: unexpected byte 0x00\n"));
  free(r.msg);
  expect_error("module m\ntrain {opt = \"sgd}\n", "t.ir:2:14: error: unterminated string");
  expect_error("module m\ntrain {opt = \"s\\qd\"}\n", "t.ir:2:16: error: unknown escape '\\q' in a string");
  expect_error("module m\ntrain {opt = \"s\\x0\"}\n",
               "t.ir:2:16: error: '\\x' needs two hex digits, not 00");
  expect_error("module m\ntrain {opt = \"s\\x00\"}\n",
               "t.ir:2:16: error: '\\x' needs two hex digits, not 00");
  expect_error("module m\ntrain {opt = \"a\x01\"}\n",
               "t.ir:2:16: error: byte 0x01 in a string; write it as \\x01");
  expect_error("module m\ndim B = 99999999999999999999\n",
               "t.ir:2:9: error: integer 99999999999999999999 is out of range");
  expect_error("module m\ntrain {lr = -1e999}\n", "t.ir:2:13: error: number -1e999 is out of range");
  expect_error("module m\nfunc @f {\n  % = neg\n}\n", "t.ir:3:3: error: expected a name after '%'");
  expect_error("module m\nfunc @ {\n}\n", "t.ir:2:6: error: expected a name after '@'");
}

static void test_values(void **state) {
  (void)state;
  expect_error("module m\nfunc @f {\n  %x = add %y, %z : f32[2]\n}\n",
               "t.ir:3:12: error: %y is not defined before this use");
  expect_error(HEAD "  %b = neg %b : f32[2,3]\n}\n", "t.ir:5:12: error: %b is not defined before this use");
  expect_error(HEAD "  %a = neg %a : f32[2,3]\n}\n", "t.ir:5:3: error: %a is defined twice");
  expect_error(HEAD "  %1 = neg %a : f32[2,3]\n  %1 = neg %a : f32[2,3]\n}\n",
               "t.ir:6:3: error: %1 is defined twice");
  expect_error(HEAD "  %b = \n}\n", "t.ir:5:8: error: expected an op name, found end of line");
  expect_error(HEAD "  %b = frob %a : f32[2,3]\n}\n", "t.ir:5:8: error: unknown op 'frob'");
  expect_error(HEAD "  %b = neg %a, : f32[2,3]\n}\n", "t.ir:5:16: error: expected a value, found ':'");
  expect_error(HEAD "  %b neg %a\n}\n", "t.ir:5:6: error: expected '=', found 'neg'");
}

static void test_types(void **state) {
  (void)state;
  expect_error(HEAD "  %b = neg %a : f32[3,2]\n}\n",
               "t.ir:5:17: error: type f32[3,2] does not match the inferred type f32[2,3]");
  expect_error(HEAD "  %b = neg %a\n}\n", "t.ir:5:14: error: missing the type ': f32[2,3]' of 'neg'");
  expect_error(HEAD "  output %a {name = \"a\"} : f32[2,3]\n}\n",
               "t.ir:5:28: error: type f32[2,3] does not match the inferred type void");
  expect_error("module m\ninput x : f32[1,1,1,1,1,1,1]\n",
               "t.ir:2:27: error: a tensor has at most 6 dimensions");
  expect_error("module m\ninput x : f32[1048576,1048576,2]\n",
               "t.ir:2:31: error: a tensor has at most 1099511627776 elements");
  expect_error("module m\ninput x : f32[0]\n",
               "t.ir:2:15: error: a dimension must be between 1 and 1099511627776");
  expect_error("module m\ninput x : f64[2]\n",
               "t.ir:2:11: error: expected a type (f32[...], i32[...] or void), found 'f64'");
  expect_error("module m\ninput x : f32[2,]\n", "t.ir:2:17: error: expected a dimension, found ']'");
  expect_error("module m\ninput x : f32 [2\n", "t.ir:2:17: error: expected ',', found end of line");
  /* a shape rule's message, at the op */
  Result r = parse(HEAD "  %b = matmul %a, %a : f32[2,3]\n}\n");
  assert_null(r.m);
  assert_int_equal(r.nerr, 1);
  assert_true(!strncmp(r.msg, "t.ir:5:8: error: shape mismatch in '@'", 38));
  free(r.msg);
}

static void test_attrs(void **state) {
  (void)state;
  expect_error(HEAD "  %s = sum %a {axes = 1} : f32[]\n}\n",
               "t.ir:5:16: error: attribute 'axes' of 'sum' must be ints, not int");
  expect_error(HEAD "  %s = sum %a : f32[]\n}\n", "t.ir:5:8: error: 'sum' needs attribute 'axes' (ints)");
  expect_error(HEAD "  %n = neg %a {foo = 1} : f32[2,3]\n}\n",
               "t.ir:5:16: error: 'neg' takes no attributes, but 'foo' is given");
  expect_error(HEAD "  %s = sum %a {axes = [0], bar = 1.5} : f32[3]\n}\n",
               "t.ir:5:28: error: 'sum' has no attribute 'bar' (it has axes, keepdim)");
  expect_error(HEAD "  %s = sum %a {axes = [0], axes = [1]} : f32[3]\n}\n",
               "t.ir:5:28: error: attribute 'axes' is given twice");
  expect_error(HEAD "  %s = sum %a {axes = [0,]} : f32[3]\n}\n",
               "t.ir:5:26: error: expected an integer, found ']'");
  expect_error(HEAD "  %s = sum %a {axes = [0] : f32[3]\n}\n",
               "t.ir:5:27: error: expected ',', found ':'");
  expect_error(HEAD "  %s = sum %a {axes = foo} : f32[3]\n}\n",
               "t.ir:5:23: error: expected an attribute value (number, string or [integers]), found 'foo'");
  expect_error(HEAD "  %c = const {value = -nan} : f32[]\n}\n",
               "t.ir:5:24: error: expected 'inf' after '-', found 'nan'");
  /* two errors in one list are both reported */
  expect_errors(HEAD "  %s = sum %a {keepdim = 1.0, frob = 2} : f32[3]\n}\n", 3,
                "t.ir:5:16: error: attribute 'keepdim' of 'sum' must be int, not float");
  /* flags are 0 or 1: every flag attribute of ops.def */
  expect_error("module m\ninput a : f32[2,3]\ninput b : f32[3,2]\nfunc @f {\n"
               "  %a = load {global = \"a\"} : f32[2,3]\n  %b = load {global = \"b\"} : f32[3,2]\n"
               "  %c = matmul %a, %b {ta = 3} : f32[2,2]\n}\n",
               "t.ir:7:23: error: attribute 'ta' of 'matmul' is a flag: 0 or 1, not 3");
  expect_error("module m\ninput a : f32[2,3]\ninput b : f32[3,2]\nfunc @f {\n"
               "  %a = load {global = \"a\"} : f32[2,3]\n  %b = load {global = \"b\"} : f32[3,2]\n"
               "  %c = matmul %a, %b {tb = -1} : f32[2,2]\n}\n",
               "t.ir:7:23: error: attribute 'tb' of 'matmul' is a flag: 0 or 1, not -1");
  const char *reduce[] = {"sum", "mean", "max"};
  for (int k = 0; k < 3; k++)
    expect_error(arena_printf(arena, "%s  %%s = %s %%a {axes = [0], keepdim = 2} : f32[1,3]\n}\n",
                              HEAD, reduce[k]),
                 arena_printf(arena, "t.ir:5:%d: error: attribute 'keepdim' of '%s' is a flag: 0 or "
                              "1, not 2", 25 + (int)strlen(reduce[k]), reduce[k]));
  expect_error(HEAD "  %s = sum %a {axes = [0]} : f32[3]\n"
               "  %d = max_grad %a, %s, %s {axes = [0], keepdim = 7} : f32[2,3]\n}\n",
               "t.ir:6:41: error: attribute 'keepdim' of 'max_grad' is a flag: 0 or 1, not 7");
  Result r = parse(HEAD "  %s = sum %a {axes = [0], keepdim = 1} : f32[1,3]\n}\n");
  assert_non_null(r.m);
  free(r.msg);
}

/* A module whose one op pools an input f32[1,2,5,5]: op, its attributes
 * after kernel [2, 2], stride [2, 2] and padding 0, its type. */
static const char *pool_ir(const char *op, const char *attrs, const char *type) {
  return arena_printf(
      arena,
      "module m\ninput x : f32[1,2,5,5]\nfunc @f {\n"
      "  %%x = load {global = \"x\"} : f32[1,2,5,5]\n"
      "  %%y = %s %%x {kernel = [2, 2], stride = [2, 2], padding = [0, 0], %s} : %s\n"
      "}\n",
      op, attrs, type);
}

/* The poolings' optional attributes: flags, and the shape rule's ranges. */
static void test_pool_attrs(void **state) {
  (void)state;
  expect_error(pool_ir("max_pool2d", "ceil_mode = 2", "f32[1,2,3,3]"),
               "t.ir:5:75: error: attribute 'ceil_mode' of 'max_pool2d' is a flag: 0 or 1, not 2");
  expect_error(pool_ir("avg_pool2d", "count_include_pad = -1", "f32[1,2,2,2]"),
               "t.ir:5:75: error: attribute 'count_include_pad' of 'avg_pool2d' is a flag: 0 or 1, "
               "not -1");
  expect_error(pool_ir("avg_pool2d", "divisor_override = 0", "f32[1,2,2,2]"),
               "t.ir:5:8: error: 'avg_pool2d': divisor_override 0 is out of range (1 to "
               "1099511627776)");
  expect_error(pool_ir("max_pool2d", "dilation = [1, 0]", "f32[1,2,2,2]"),
               "t.ir:5:8: error: 'max_pool2d': dilation 0 is out of range (1 to 1099511627776)");
  expect_error(pool_ir("avg_pool2d", "dilation = [2, 2]", "f32[1,2,2,2]"),
               "t.ir:5:75: error: 'avg_pool2d' has no attribute 'dilation' (it has kernel, stride, "
               "padding, ceil_mode, divisor_override, count_include_pad)");
  /* ceil_mode: 5 by 2 gives 3 windows, the last one clipped */
  expect_error(pool_ir("max_pool2d", "ceil_mode = 1", "f32[1,2,2,2]"),
               "t.ir:5:92: error: type f32[1,2,2,2] does not match the inferred type f32[1,2,3,3]");
  Result r = parse(pool_ir("max_pool2d", "ceil_mode = 1, dilation = [2, 2]", "f32[1,2,2,2]"));
  assert_non_null(r.m);
  free(r.msg);
  r = parse(pool_ir("avg_pool2d", "count_include_pad = 0, divisor_override = 3", "f32[1,2,2,2]"));
  assert_non_null(r.m);
  free(r.msg);
}

/* The limits of the pads that fill with copies, in IR text. */
static void test_copy_pads(void **state) {
  (void)state;
  expect_error(HEAD "  %p = pad_reflect %a {axis = 1, begin = 3, size = 7} : f32[2,7]\n}\n",
               "t.ir:5:8: error: 'pad_reflect': padding (3, 1) of a dimension of 3 must be less "
               "than it");
  expect_error(HEAD "  %p = pad_circular %a {axis = -1, begin = 0, size = 7} : f32[2,7]\n}\n",
               "t.ir:5:8: error: 'pad_circular': padding (0, 4) of a dimension of 3 wraps around "
               "more than once");
  expect_error(HEAD "  %p = pad_replicate %a {axis = 1, begin = 5, size = 7} : f32[2,7]\n}\n",
               "t.ir:5:8: error: 'pad_replicate': 3 elements at 5 do not fit in 7");
  expect_error(HEAD "  %p = pad_reflect_grad %a {axis = 1, begin = 1, size = 1} : f32[2,1]\n}\n",
               "t.ir:5:8: error: 'pad_reflect_grad': padding (1, 1) of a dimension of 1 must be "
               "less than it");
  Result r =
      parse(HEAD "  %p = pad_circular %a {axis = 1, begin = 3, size = 9} : f32[2,9]\n"
                 "  %q = pad_reflect_grad %a {axis = 1, begin = 1, size = 2} : f32[2,2]\n}\n");
  assert_non_null(r.m);
  free(r.msg);
}

static void test_module_decls(void **state) {
  (void)state;
  expect_error("module m\ndim B 4\n", "t.ir:2:7: error: expected '=', found '4'");
  expect_error("module m\nplan maybe\n",
               "t.ir:2:6: error: expected 'none', 'auto', 'even' or 'explicit', found 'maybe'");
  expect_error("module m\nplan auto\nplan even\n", "t.ir:3:1: error: a module has one plan");
  expect_error("module m\ntrain {lr = 1}\ntrain\n", "t.ir:3:1: error: a module has one train line");
  expect_error("module m\ntrain {lr = \"x\"}\n", "t.ir:2:8: error: field 'lr' of train must be a number");
  /* the language's ranges (frontend/lower.c reads them from the same field table) */
  expect_error("module m\ntrain {lr = -1.0}\n",
               "t.ir:2:8: error: field 'lr' of train must be positive, not -1");
  expect_error("module m\ntrain {lr = 0}\n", "t.ir:2:8: error: field 'lr' of train must be positive, not 0");
  expect_error("module m\ntrain {lr = nan}\n",
               "t.ir:2:8: error: field 'lr' of train must be finite and positive, not nan");
  expect_error("module m\ntrain {lr = 0.1, momentum = 1.0}\n",
               "t.ir:2:18: error: field 'momentum' of train must be in [0, 1), not 1");
  expect_error("module m\ntrain {beta1 = -0.5}\n",
               "t.ir:2:8: error: field 'beta1' of train must be in [0, 1), not -0.5");
  expect_error("module m\ntrain {beta2 = 1.5}\n",
               "t.ir:2:8: error: field 'beta2' of train must be in [0, 1), not 1.5");
  expect_error("module m\ntrain {eps = -1e-08}\n",
               "t.ir:2:8: error: field 'eps' of train must be positive, not -1e-08");
  expect_error("module m\ntrain {weight_decay = -0.01}\n",
               "t.ir:2:8: error: field 'weight_decay' of train must be non-negative, not -0.01");
  expect_error("module m\ntrain {dampening = 2.0}\n",
               "t.ir:2:8: error: field 'dampening' of train must be in [0, 1], not 2");
  expect_error("module m\ntrain {clip_norm = -1.0}\n",
               "t.ir:2:8: error: field 'clip_norm' of train must be positive, not -1");
  expect_errors("module m\ntrain {lr = -1.0, momentum = -1.0}\n", 2,
                "t.ir:2:8: error: field 'lr' of train must be positive, not -1");
  expect_error("module m\ntrain {warmup = 1.5}\n",
               "t.ir:2:8: error: field 'warmup' of train must be an integer");
  expect_error("module m\ntrain {loss = 3}\n", "t.ir:2:8: error: field 'loss' of train must be a string");
  expect_error("module m\ntrain {opt = \"lbfgs\"}\n",
               "t.ir:2:8: error: field 'opt' of train is 'lbfgs', not one of sgd, adam, adamw, "
               "demo, adagrad, sparse_adam, rowwise_adagrad");
  expect_error("module m\ntrain {schedule = 3}\n",
               "t.ir:2:8: error: field 'schedule' of train must be a string");
  expect_error("module m\nparam w : f32[2] {init = \"xavier\"}\n",
               "t.ir:2:19: error: field 'init' of a global is 'xavier', not one of zeros, ones, "
               "glorot, normal, uniform, kaiming_uniform, kaiming_normal");
  expect_error("module m\ntrain {foo = 1}\n",
               "t.ir:2:8: error: train has no field 'foo' (it has loss, opt, lr, momentum, "
               "weight_decay, beta1, beta2, eps, schedule, warmup, total, nesterov, eps_kingma, "
               "clip_norm, dampening, accumulate, beta, topk, chunk, lr_decay, "
               "initial_accumulator_value, min_lr, end_factor, gamma, step_size, "
               "decay_min_rank)");
  expect_error("module m\nparam w f32[2]\n", "t.ir:2:9: error: expected ':', found 'f32'");
  expect_error("module m\nparam w : f32[2] {init = glorot}\n",
               "t.ir:2:26: error: expected an attribute value (number, string or [integers]), found "
               "'glorot'");
  expect_error("module m\ninput x : f32[2] loc \"a.dt\":1\n",
               "t.ir:2:30: error: expected ':', found end of line");
  expect_error("module m\ninput x : f32[2] loc a.dt:1:1\n",
               "t.ir:2:22: error: expected a file name string, found 'a.dt'");
  expect_error("module m\ninput x : f32[2] loc \"a.dt\":2147483648:1\n",
               "t.ir:2:29: error: a line number must be between 1 and 2147483647");
  expect_error("module m\ninput x : f32[2] loc \"a.dt\":-3:1\n",
               "t.ir:2:29: error: a line number must be between 1 and 2147483647");
  expect_error("module m\ninput x : f32[2] loc \"a.dt\":0:1\n",
               "t.ir:2:29: error: a line number must be between 1 and 2147483647");
  expect_error("module m\ninput x : f32[2] loc \"a.dt\":3:-1\n",
               "t.ir:2:31: error: a column number must be between 1 and 2147483647");
}

static void test_cluster_and_mesh(void **state) {
  (void)state;
  expect_error("module m\ncluster c {\n  node a\n  device d on b\n}\n", "t.ir:4:15: error: unknown node 'b'");
  expect_error("module m\ncluster c {\n  gpu g\n}\n",
               "t.ir:3:3: error: expected 'node', 'device', 'link', 'collective' or '}', found 'gpu'");
  expect_error("module m\ncluster c {\n  link l {bw = 1, speed = 2}\n}\n",
               "t.ir:3:19: error: a link has no field 'speed' (it has bw, lat, spread)");
  expect_error("module m\ncluster c {\n  collective broadcast {ranks = 2, bw = 1.0}\n}\n",
               "t.ir:3:14: error: unknown collective 'broadcast'");
  expect_error("module m\ncluster c {\n  collective all_reduce {ranks = 2, size = 2}\n}\n",
               "t.ir:3:37: error: a collective has no field 'size' (it has method, ranks, bw, "
               "lat, spread)");
  expect_error("module m\ncluster c {\n  node a\n  device d on a {gflops = 1.0, spread = -0.5}\n}\n",
               "t.ir:4:3: error: the spread of a device must be a finite number of 0 or more");
  expect_error("module m\ncluster c {\n  link intra {bw = 1.0, lat = 1.0, spread = inf}\n}\n",
               "t.ir:3:3: error: the spread of a link must be a finite number of 0 or more");
  expect_error("module m\ncluster c {\n  collective all_reduce {ranks = 2, bw = 1.0, spread = nan}\n}\n",
               "t.ir:3:3: error: the spread of a collective must be a finite number of 0 or more");
  /* the language's ranges (frontend/cluster.c reads them from the same field tables) */
  expect_error("module m\ncluster c {\n  node a\n  device d on a {gflops = -1.0, mem = 8}\n}\n",
               "t.ir:4:18: error: field 'gflops' of a device must be positive, not -1");
  expect_error("module m\ncluster c {\n  node a\n  device d on a {gflops = 0.0, mem = 8}\n}\n",
               "t.ir:4:18: error: field 'gflops' of a device must be positive, not 0");
  expect_error("module m\ncluster c {\n  node a\n  device d on a {gflops = inf, mem = 8}\n}\n",
               "t.ir:4:18: error: field 'gflops' of a device must be finite and positive, not inf");
  expect_error("module m\ncluster c {\n  node a\n  device d on a {gflops = 1.0, mem = 0}\n}\n",
               "t.ir:4:32: error: field 'mem' of a device must be from 1 byte to 9e18, not 0");
  expect_error("module m\ncluster c {\n  node a\n  device d on a {gflops = 1.0, attn = -0.5}\n}\n",
               "t.ir:4:32: error: field 'attn' of a device must be positive, not -0.5");
  expect_error("module m\ncluster c {\n  node a\n  device d on a {gflops = 1.0, attn = 0.0}\n}\n",
               "t.ir:4:32: error: field 'attn' of a device must be positive, not 0");
  expect_error("module m\ncluster c {\n  node a\n  device d on a {gflops = 1.0, score = -1e-09}\n}\n",
               "t.ir:4:32: error: field 'score' of a device must be positive and at most 9e18, "
               "not -1e-09");
  expect_error("module m\ncluster c {\n  node a\n  device d on a {gflops = 1.0, tile_m = 65, "
               "tile_n = 32}\n}\n",
               "t.ir:4:32: error: field 'tile_m' of a device must be from 1 to 64, not 65");
  expect_error("module m\ncluster c {\n  node a\n  device d on a {gflops = 1.0, tile_n = 32}\n}\n",
               "t.ir:4:3: error: a device gives tile_m and tile_n together, or neither");
  expect_error("module m\ncluster c {\n  link intra {bw = -1.0, lat = 1.0}\n}\n",
               "t.ir:3:15: error: field 'bw' of a link must be positive and at most 9e18, not -1");
  expect_error("module m\ncluster c {\n  link intra {bw = 1.0, lat = 0.0}\n}\n",
               "t.ir:3:25: error: field 'lat' of a link must be positive and at most 9e18, not 0");
  expect_error("module m\ncluster c {\n  link intra {bw = 1e19, lat = 1.0}\n}\n",
               "t.ir:3:15: error: field 'bw' of a link must be positive and at most 9e18, not 1e+19");
  expect_error("module m\ncluster c {\n  collective all_reduce {ranks = 2, bw = 1.0, lat = -2.0}\n}\n",
               "t.ir:3:47: error: field 'lat' of a collective must be positive and at most 9e18, "
               "not -2");
  expect_error("module m\ncluster c {\n  collective all_reduce {method = 5, ranks = 2, "
               "bw = 1.0}\n}\n",
               "t.ir:3:3: error: collective all_reduce needs a method from 0 to 4, ranks from 2, "
               "a finite bw above 0 and a finite lat of 0 or more");
  expect_error("module m\ncluster c {\n  collective all_gather {ranks = 1, bw = 1.0}\n}\n",
               "t.ir:3:3: error: collective all_gather needs a method from 0 to 4, ranks from 2, "
               "a finite bw above 0 and a finite lat of 0 or more");
  expect_error("module m\ncluster c {\n  node a\n}\ncluster d {\n  node b\n}\n",
               "t.ir:5:1: error: a module has one cluster");
  expect_error("module m\ncluster c {\n  node a\n", "t.ir:4:1: error: missing '}' to close the cluster opened on line 2");
  expect_error("module m\ncluster c { node a\n}\n",
               "t.ir:2:13: error: expected end of line after '{', found 'node'");
  expect_error("module m\nmesh q[dp = 2] on [0]\n",
               "t.ir:2:19: error: mesh 'q' has 2 positions, but 1 devices are listed");
  expect_error("module m\nmesh q[dp = 1] on [0, 0]\n",
               "t.ir:2:23: error: mesh 'q' has 1 positions, but more devices are listed");
  expect_error("module m\nmesh q[dp = 1] on [1]\n",
               "t.ir:2:20: error: device 1 is out of range: without a cluster the only device is 0");
  expect_error("module m\nmesh q[dp = 1] on [a0]\n", "t.ir:2:20: error: unknown device 'a0'");
  expect_error("module m\nmesh q[a = 1, b = 1, c = 1, d = 1] on [0]\n",
               "t.ir:2:29: error: a mesh has at most 3 axes");
  expect_error("module m\nmesh q[a = 0] on [0]\n",
               "t.ir:2:12: error: an axis size must be between 1 and 1048576");
  expect_error("module m\nmesh q[a = 1024, b = 2048] on [0]\n",
               "t.ir:2:18: error: a mesh has at most 1048576 positions");
}

#define MESH "module m\nmesh q[dp = 1, mp = 1] on [0]\n"

static void test_shardings(void **state) {
  (void)state;
  expect_error(MESH "input x : f32[2] shard r[*]\n", "t.ir:3:24: error: unknown mesh 'r'");
  expect_error(MESH "input x : f32[2] shard q[tp]\n", "t.ir:3:26: error: mesh 'q' has no axis 'tp'");
  expect_error(MESH "input x : f32[2] shard q[*, *]\n",
               "t.ir:3:29: error: sharding has more entries than the type's rank 1");
  expect_error(MESH "input x : f32[2,2] shard q[*]\n",
               "t.ir:3:27: error: sharding has 1 entries, but the type has rank 2");
  expect_error(MESH "input x : f32[2] shard q[dp(0.5, 0.5)]\n",
               "t.ir:3:26: error: axis 'dp' has size 1, but 2 ratios are given");
  expect_error(MESH "input x : f32[2] shard q[dp(]\n", "t.ir:3:29: error: expected a number, found ']'");
  /* ratios are checked as they are parsed: the blocks give the types of
   * what follows */
  const char *mesh3 = "module m\ncluster c {\n  node a\n"
                      "  device a0 on a {kind = \"cpu\", gflops = 80.0, mem = 1073741824}\n"
                      "  device a1 on a {kind = \"cpu\", gflops = 80.0, mem = 1073741824}\n"
                      "  device a2 on a {kind = \"cpu\", gflops = 40.0, mem = 1073741824}\n}\n"
                      "mesh q[dp = 3] on [a0, a1, a2]\n";
  char buf[512];
  snprintf(buf, sizeof buf, "%sinput y : i32[5] shard q[dp(-0.6, 0.2, 0.2)]\n", mesh3);
  expect_error(buf, "t.ir:9:26: error: ratio 0 of axis 'dp' is -0.6; ratios must be positive "
                    "(or one 1, the rest 0)");
  snprintf(buf, sizeof buf, "%sinput y : i32[5] shard q[dp(0.6, 0.2, inf)]\n", mesh3);
  expect_error(buf, "t.ir:9:26: error: ratio 2 of axis 'dp' is inf; ratios must be positive "
                    "(or one 1, the rest 0)");
  /* a placement (a table-wise table's columns): 1 on one device, 0 on the
   * others; a 0 elsewhere is refused */
  snprintf(buf, sizeof buf, "%sinput y : i32[5] shard q[dp(0.0, 0.5, 0.5)]\n", mesh3);
  expect_error(buf, "t.ir:9:26: error: ratio 0 of axis 'dp' is 0; ratios must be positive "
                    "(or one 1, the rest 0)");
  snprintf(buf, sizeof buf, "%sinput y : i32[5] shard q[dp(0.0, 1.0, 0.0)]\n", mesh3);
  Result placed = parse(buf);
  assert_non_null(placed.m);
  assert_int_equal(ir_placed(placed.m->global.a[0].shard->ratio[0], 3), 1);
  free(placed.msg);
  snprintf(buf, sizeof buf, "%sinput y : i32[5] shard q[dp(0.6, 0.2, 0.3)]\n", mesh3);
  expect_error(buf, "t.ir:9:26: error: the ratios of axis 'dp' sum to 1.1, not 1");
  expect_error(MESH "input x : f32[2] shard q[*] full\n", "t.ir:3:29: error: expected end of line, found 'full'");
}

static void test_blocks_and_recovery(void **state) {
  (void)state;
  expect_error("module m\nfunc @f {\n", "t.ir:3:1: error: missing '}' to close the function opened on line 2");
  /* the declaration after a forgotten '}' still parses */
  Result r = parse("module m\nfunc @f {\ninput x : f32[2]\nfunc @g {\n}\n");
  assert_null(r.m);
  assert_int_equal(r.nerr, 1);
  assert_string_equal(r.msg, "t.ir:3:1: error: missing '}' to close the function opened on line 2\n"
                             "input x : f32[2]\n^\n");
  free(r.msg);
  expect_error("module m\nfunc @f {\n}}\n", "t.ir:3:2: error: expected end of line, found '}'");
  expect_error("module m\nfunc f {\n  %x = bad\n}\ninput x : f32[]\n",
               "t.ir:2:6: error: expected a function name (@name), found 'f'");
  /* the body of a bad block header is skipped quietly, to its '}' */
  expect_errors("module m\ncluster {\n  node # $\n  dev ! ^\n}\ndim B = 1 &\n", 2,
                "t.ir:2:9: error: expected a cluster name, found '{'");
  /* one error per bad line, and the good lines between them parse */
  r = parse(HEAD "  %b = neg %a : f32[9]\n  %c = neg %a : f32[2,3]\n  %d = frob\n"
                 "  %e = neg %c : f32[2,3]\n  %f = neg %q : f32[2,3]\n}\n");
  assert_null(r.m);
  assert_int_equal(r.nerr, 3);
  assert_non_null(strstr(r.msg, "t.ir:5:17: error: type f32[9]"));
  assert_non_null(strstr(r.msg, "t.ir:7:8: error: unknown op 'frob'"));
  assert_non_null(strstr(r.msg, "t.ir:9:12: error: %q is not defined"));
  free(r.msg);
  /* the users of a failed value are dropped without more errors */
  expect_errors(HEAD "  %b = neg %a : f32[9]\n  %c = neg %b : f32[2,3]\n  %d = add %c, %b : f32[2,3]\n}\n",
                1, "t.ir:5:17: error: type f32[9] does not match the inferred type f32[2,3]");
  /* stray bytes: one error, then the line is skipped */
  expect_errors("module m\ndim B = 1 # $ ! \x02\ndim C = 2 &\n", 2, "t.ir:2:11: error: unexpected character '#'");
}

/* A dropout block's place must fit its operand: 2 x rank entries, each block
 * inside its whole dimension. */
static void test_dropout_at(void **state) {
  (void)state;
  static const char head[] = "module m\ninput x : f32[4,3]\nfunc @forward {\n"
                             "  %x = load {global = \"x\"} : f32[4,3]\n";
  char text[512];
  snprintf(text, sizeof text, "%s  %%y = dropout %%x {p = 0.1, seed = 1, at = [8, 3]} : "
           "f32[4,3]\n  output %%y {name = \"y\"}\n}\n", head);
  expect_error(text, "t.ir:5:8: error: 'dropout': 'at' has 2 entries; a block of rank 2 needs 4 "
                     "(the whole dims, then the block's first indices)");
  snprintf(text, sizeof text, "%s  %%y = dropout %%x {p = 0.1, seed = 1, at = [8, 3, 6, 0]} : "
           "f32[4,3]\n  output %%y {name = \"y\"}\n}\n", head);
  expect_error(text, "t.ir:5:8: error: 'dropout': a block of 4 from 6 does not fit dimension 0 "
                     "of length 8");
}

/* A repeat gives its body an operand for every arg the body reads. */
static void test_repeat_args(void **state) {
  (void)state;
  expect_error("module m\ninput a : f32[2]\n"
               "func @b body {\n  %x = arg {index = 0} : f32[2]\n  %y = arg {index = 1} : f32[2]\n"
               "  output %x {name = \"x\"}\n}\n"
               "func @f {\n  %a = load {global = \"a\"} : f32[2]\n"
               "  %r = repeat %a {body = \"b\", n = 2, carry = 1, stacked = 0} : f32[2]\n}\n",
               "t.ir:10:8: error: @b reads arg 1, but 'repeat' gives it 1 operand");
}

static void test_error_cap(void **state) {
  (void)state;
  char *text = arena_printf(arena, "module m\n");
  for (int k = 0; k < 30; k++)
    text = arena_printf(arena, "%sbad %d\n", text, k);
  Result r = parse(text);
  assert_null(r.m);
  assert_int_equal(r.nerr, 20);
  assert_non_null(strstr(r.msg, "dtc: fatal error: too many errors emitted, stopping now\n"));
  free(r.msg);
}

/* Every prefix of a valid text, and many one-byte changes of it, parse or
 * fail cleanly; what parses prints and parses back to the same text. */
static const char *sample =
    "module s ; a comment\n"
    "dim B = 4 loc \"s.dt\":1:2\n"
    "cluster c {\n  node a\n  device a0 on a {kind = \"cpu\", gflops = 1.5, mem = 1024}\n"
    "  link l {bw = 1e9, lat = 1e-06}\n}\n"
    "mesh q[dp = 1] on [a0]\nplan even\n"
    "train {loss = \"l\", opt = \"sgd\", lr = 0.5}\n"
    "input x : f32[4,2] shard q[dp(1.0), *]\nparam w : f32[2,3] {init = \"glorot\"}\n"
    "func @forward {\n  %x = load {global = \"x\"} : f32[4,2]\n"
    "  %w = load {global = \"w\"} : f32[2,3]\n"
    "  %y = matmul %x, %w {tb = 0} : f32[4,3] shard q[dp, *] partial fuse 1 offset 8 loc \"s.dt\":3:4\n"
    "  %l = sum %y {axes = [0, 1]} : f32[]\n  %m = const {value = -inf} : f32[]\n"
    "  output %l {name = \"l\"}\n}\n";

static void check_round_trip(const Module *m) {
  char *t1, *t2;
  size_t n1, n2;
  FILE *f = open_memstream(&t1, &n1);
  ir_print(f, m);
  fclose(f);
  Result r = parse(t1);
  if (!r.m)
    fail_msg("printed text does not parse:\n%s\n%s", r.msg, t1);
  f = open_memstream(&t2, &n2);
  ir_print(f, r.m);
  fclose(f);
  assert_string_equal(t1, t2);
  free(t1);
  free(t2);
  free(r.msg);
}

/* pad's value in IR text: every spelling of a float, the infinities
 * among them, reads back to the same double and prints back to the same
 * text; absent, it is 0 and not printed. An integer is no float, and an
 * i32 tensor takes only integers of 32 bits. */
/* bn_scale's derivative assumes its operand is a bn_center of x and its
 * statistic keeps x's dims or 1: anything else is refused. */
static void test_batch_norm_ops(void **state) {
  (void)state;
  const char *ok = HEAD "  %m = mean %a {axes = [0], keepdim = 1} : f32[1,3]\n"
                        "  %c = bn_center %a, %m : f32[2,3]\n"
                        "  %y = bn_scale %c, %m : f32[2,3]\n  output %y {name = \"y\"}\n}\n";
  Result r = parse(ok);
  if (!r.m)
    fail_msg("%s", r.msg);
  free(r.msg);
  expect_error(HEAD "  %y = bn_scale %a, %a : f32[2,3]\n}\n",
               "t.ir:5:8: error: the first operand of 'bn_scale' must be a bn_center, not a load");
  expect_error(HEAD "  %m = sum %a {axes = [0]} : f32[3]\n  %c = bn_center %a, %m : f32[2,3]\n}\n",
               "t.ir:6:8: error: 'bn_center' needs a statistic of f32[2,3] with its dims or 1, "
               "not f32[3]");
}

static void test_pad_value(void **state) {
  (void)state;
  static const struct {
    const char *text;
    double v;
  } values[] = {
      {"1.2", 1.2},   {"-3e+38", -3e38}, {"-inf", -1.0 / 0.0}, {"inf", 1.0 / 0.0},
      {"-0.0", -0.0}, {"0.5", 0.5},      {"1e-45", 1e-45},
  };
  for (int k = 0; k < COUNTOF(values); k++) {
    Result r = parse(
        arena_printf(arena,
                     "%s  %%p = pad %%a {axis = 1, begin = 1, size = 5, value = %s} : f32[2,5]\n"
                     "  %%q = pad %%p {axis = 0, begin = 0, size = 3} : f32[3,5]\n}\n",
                     HEAD, values[k].text));
    if (!r.m)
      fail_msg("value = %s: %s", values[k].text, r.msg);
    const Func *f = r.m->func.a[0];
    double got = ir_get_float(f->inst.a[1], "value", 7);
    assert_memory_equal(&got, &values[k].v, sizeof got);
    assert_null(ir_attr(f->inst.a[2], "value"));
    char *text;
    size_t n;
    FILE *out = open_memstream(&text, &n);
    ir_print(out, r.m);
    fclose(out);
    if (!strstr(text, arena_printf(arena, "size = 5, value = %s}", values[k].text)) ||
        !strstr(text, "size = 3} : f32[3,5]"))
      fail_msg("value = %s prints as:\n%s", values[k].text, text);
    free(text);
    check_round_trip(r.m);
    free(r.msg);
  }
  expect_error(HEAD "  %p = pad %a {axis = 1, begin = 1, size = 5, value = 2} : f32[2,5]\n}\n",
               "t.ir:5:47: error: attribute 'value' of 'pad' must be float, not int");
  const char *i32 = "module m\ninput a : i32[2,3]\nfunc @f {\n"
                    "  %a = load {global = \"a\"} : i32[2,3]\n";
  expect_error(arena_printf(arena,
                            "%s  %%p = pad %%a {axis = 1, begin = 1, size = 5, value = "
                            "-inf} : i32[2,5]\n}\n",
                            i32),
               "t.ir:5:8: error: 'pad' fills an i32 tensor with a 32-bit integer, not -inf");
  Result r = parse(arena_printf(arena,
                                "%s  %%p = pad %%a {axis = 1, begin = 1, size = 5, value = "
                                "-7.0} : i32[2,5]\n}\n",
                                i32));
  assert_non_null(r.m);
  free(r.msg);
}

static void test_prefixes_and_mutations(void **state) {
  (void)state;
  size_t len = strlen(sample);
  Result r = parse(sample);
  if (!r.m)
    fail_msg("%s", r.msg);
  free(r.msg);
  for (size_t n = 0; n <= len; n++) {
    Arena *keep = arena;
    arena = arena_new();
    r = parse_bytes(sample, n);
    if (r.m)
      check_round_trip(r.m);
    free(r.msg);
    arena_free(arena);
    arena = keep;
  }
  static const char bytes[] = {0, '\n', '"', '%', '[', ')', '9', 'x', '-', '\\', ',', '}', (char)0xff};
  char *buf = malloc(len);
  for (size_t i = 0; i < len; i++)
    for (int b = 0; b < COUNTOF(bytes); b++) {
      Arena *keep = arena;
      arena = arena_new();
      memcpy(buf, sample, len);
      buf[i] = bytes[b];
      r = parse_bytes(buf, len);
      if (r.m)
        check_round_trip(r.m);
      free(r.msg);
      arena_free(arena);
      arena = keep;
    }
  free(buf);
}

static void test_random_bytes(void **state) {
  (void)state;
  uint64_t x = 88172645463325252u;
  char buf[300];
  for (int k = 0; k < 3000; k++) {
    size_t n = 0;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    size_t len = x % sizeof buf;
    /* half the inputs start well, so the parser goes past the first line */
    if (k & 1) {
      memcpy(buf, "module r\nfunc @f {\n", 19);
      n = 19;
    }
    for (; n < len; n++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      buf[n] = k % 3 ? " %@=:,[]{}()*-\"\\;\nabf32i09.x"[x % 27] : (char)x;
    }
    Arena *keep = arena;
    arena = arena_new();
    Result r = parse_bytes(buf, n);
    if (r.m)
      check_round_trip(r.m);
    free(r.msg);
    arena_free(arena);
    arena = keep;
  }
}

/* Long names, long lists and long functions have no fixed limits. */
static void test_large_inputs(void **state) {
  (void)state;
  size_t big = 1 << 20;
  char *name = malloc(big + 1);
  memset(name, 'n', big);
  name[big] = 0;
  Result r = parse(arena_printf(arena, "module %s\ninput \"%s\" : f32[2]\n", name, name));
  assert_non_null(r.m);
  assert_int_equal(strlen(r.m->global.a[0].name), big);
  free(r.msg);
  /* a huge token in an error message is cut short */
  r = parse(arena_printf(arena, "module m\n%s\n", name));
  assert_int_equal(r.nerr, 1);
  assert_true(strlen(r.msg) < 400);
  free(r.msg);
  free(name);

  char *text = arena_printf(arena, "module m\ninput a : f32[2]\nfunc @f {\n  %%v0 = load {global = \"a\"} : f32[2]\n");
  size_t cap = 1 << 22, n = strlen(text);
  char *buf = malloc(cap);
  memcpy(buf, text, n);
  for (int k = 1; k < 20000; k++)
    n += (size_t)snprintf(buf + n, cap - n, "  %%v%d = neg %%v%d : f32[2]\n", k, k - 1);
  n += (size_t)snprintf(buf + n, cap - n, "}\n");
  r = parse_bytes(buf, n);
  assert_non_null(r.m);
  assert_int_equal(r.m->func.a[0]->inst.n, 20000);
  free(r.msg);

  n = (size_t)snprintf(buf, cap, "%s", HEAD "  %s = sum %a {axes = [");
  for (int k = 0; k < 100000; k++)
    n += (size_t)snprintf(buf + n, cap - n, "%s0", k ? ", " : "");
  n += (size_t)snprintf(buf + n, cap - n, "]} : f32[3]\n}\n");
  r = parse_bytes(buf, n);
  assert_null(r.m);
  assert_non_null(strstr(r.msg, "axis 0 is listed twice"));
  free(r.msg);

  memset(buf, '[', cap);
  memcpy(buf, "module m\ndim x = ", 17);
  r = parse_bytes(buf, cap);
  assert_int_equal(r.nerr, 1);
  free(r.msg);
  memset(buf, '{', cap);
  memcpy(buf, "module m\ntrain ", 15);
  r = parse_bytes(buf, cap);
  assert_int_equal(r.nerr, 1);
  free(r.msg);
  expect_error(arena_printf(arena, "module m\ntrain {%s}\n",
                            "a0=1,a1=1,a2=1,a3=1,a4=1,a5=1,a6=1,a7=1,a8=1,a9=1,b0=1,b1=1,b2=1,b3=1,b4=1,"
                            "b5=1,b6=1,b7=1,b8=1,b9=1,c0=1,c1=1,c2=1,c3=1,c4=1,c5=1,c6=1,c7=1,c8=1,c9=1,"
                            "d0=1,d1=1,d2=1,d3=1,d4=1,d5=1,d6=1,d7=1,d8=1,d9=1,e0=1,e1=1,e2=1,e3=1,e4=1,"
                            "e5=1,e6=1,e7=1,e8=1,e9=1,f0=1,f1=1,f2=1,f3=1,f4=1,f5=1,f6=1,f7=1,f8=1,f9=1,"
                            "g0=1,g1=1,g2=1,g3=1,g4=1"),
               "t.ir:2:328: error: more than 64 attributes");
  free(buf);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_start),        cmocka_unit_test(test_deterministic),
      cmocka_unit_test(test_lexical),      cmocka_unit_test(test_values),
      cmocka_unit_test(test_types),        cmocka_unit_test(test_attrs),
      cmocka_unit_test(test_pool_attrs),   cmocka_unit_test(test_copy_pads),
      cmocka_unit_test(test_module_decls), cmocka_unit_test(test_cluster_and_mesh),
      cmocka_unit_test(test_shardings),    cmocka_unit_test(test_blocks_and_recovery),
      cmocka_unit_test(test_error_cap),    cmocka_unit_test(test_prefixes_and_mutations),
      cmocka_unit_test(test_random_bytes), cmocka_unit_test(test_large_inputs),
      cmocka_unit_test(test_dropout_at),   cmocka_unit_test(test_repeat_args),
      cmocka_unit_test(test_pad_value),    cmocka_unit_test(test_batch_norm_ops),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
