/* test_probe.c: dtc-probe's cluster writer and name check (tools/probe.c,
 * included without its main) on fixed measurements, against hand-checked text. */
#define DTC_PROBE_NO_MAIN
#include "../../tools/probe.c"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

/* The writer's output for p, in a malloc'd string. */
static char *written(const Probe *p) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  assert_non_null(f);
  assert_int_equal(probe_write(f, p), 0);
  assert_int_equal(fclose(f), 0);
  return text;
}

/* Two nodes, ranks grouped by node, both links; rounding to the printed
 * decimals. */
static void two_nodes(void **state) {
  (void)state;
  double gflops[3] = {80.04, 40.06, 39.95};
  double mem[3] = {8.0 * (1 << 30), 8.0 * (1 << 30), 3.5 * (1 << 30)};
  int node[3] = {0, 0, 1};
  const char *host[2] = {"ws", "pi.lan"};
  Probe p = {.name = "lab", .nranks = 3, .nnodes = 2, .reps = 20, .gflops = gflops,
             .mem = mem, .node = node, .host = host, .blas = "Haswell",
             .intra = {.present = true, .a = 0, .b = 1, .bw = 10.456e9, .lat = 0.414e-6},
             .inter = {.present = true, .a = 0, .b = 2, .bw = 0.125e9, .lat = 50e-6}};
  char *text = written(&p);
  assert_string_equal(text,
    "# dtc-probe: 3 ranks on 2 nodes; one-thread sgemm n=512 (OpenBLAS Haswell) and "
    "ping-pong, median of 20\n"
    "cluster lab {\n"
    "  node n0 {    # host ws\n"
    "    device r0: cpu(gflops = 80.0, mem = 8.00GiB)\n"
    "    device r1: cpu(gflops = 40.1, mem = 8.00GiB)\n"
    "  }\n"
    "  node n1 {    # host pi.lan\n"
    "    device r2: cpu(gflops = 40.0, mem = 3.50GiB)\n"
    "  }\n"
    "  link intra(bw = 10.46GB/s, lat = 0.41us)    # ranks 0 and 1\n"
    "  link inter(bw = 0.12GB/s, lat = 50.00us)    # ranks 0 and 2\n"
    "}\n");
  free(text);
}

/* One rank: no links. Values too small to print become the smallest printed
 * value, so the file stays valid. Ranks interleaved over nodes are listed
 * node by node. */
static void one_rank_and_floors(void **state) {
  (void)state;
  double gflops[1] = {0.01}, mem[1] = {1000};
  int node[1] = {0};
  const char *host[1] = {"vm"};
  Probe p = {.name = "probed", .nranks = 1, .nnodes = 1, .reps = 1, .gflops = gflops,
             .mem = mem, .node = node, .host = host, .blas = "Prescott"};
  char *text = written(&p);
  assert_string_equal(text,
    "# dtc-probe: 1 rank on 1 node; one-thread sgemm n=512 (OpenBLAS Prescott) and "
    "ping-pong, median of 1\n"
    "cluster probed {\n"
    "  node n0 {    # host vm\n"
    "    device r0: cpu(gflops = 0.1, mem = 0.01GiB)\n"
    "  }\n"
    "}\n");
  free(text);

  double g3[3] = {10, 20, 30}, m3[3] = {1 << 30, 1 << 30, 1 << 30};
  int n3[3] = {0, 1, 0};
  const char *h2[2] = {"a", "b"};
  Probe q = {.name = "mixed", .nranks = 3, .nnodes = 2, .reps = 5, .gflops = g3, .mem = m3,
             .node = n3, .host = h2, .blas = "Haswell",
             .intra = {.present = true, .a = 0, .b = 2, .bw = 1e9, .lat = 1e-9},
             .inter = {.present = true, .a = 0, .b = 1, .bw = 1e6, .lat = 1e-3}};
  text = written(&q);
  assert_string_equal(text,
    "# dtc-probe: 3 ranks on 2 nodes; one-thread sgemm n=512 (OpenBLAS Haswell) and "
    "ping-pong, median of 5\n"
    "cluster mixed {\n"
    "  node n0 {    # host a\n"
    "    device r0: cpu(gflops = 10.0, mem = 1.00GiB)\n"
    "    device r2: cpu(gflops = 30.0, mem = 1.00GiB)\n"
    "  }\n"
    "  node n1 {    # host b\n"
    "    device r1: cpu(gflops = 20.0, mem = 1.00GiB)\n"
    "  }\n"
    "  link intra(bw = 1.00GB/s, lat = 0.01us)    # ranks 0 and 2\n"
    "  link inter(bw = 0.01GB/s, lat = 1000.00us)    # ranks 0 and 1\n"
    "}\n");
  free(text);
}

static void names(void **state) {
  (void)state;
  assert_true(probe_valid_name("probed"));
  assert_true(probe_valid_name("_lab2"));
  assert_false(probe_valid_name(""));
  assert_false(probe_valid_name("2lab"));
  assert_false(probe_valid_name("my-lab"));
  assert_false(probe_valid_name("cluster"));
  assert_false(probe_valid_name("over"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(two_nodes),
    cmocka_unit_test(one_rank_and_floors),
    cmocka_unit_test(names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
