/* matmul_shapes.h: the products bench/matmul measures, one SHAPE line each
 * (bench/CMakeLists.txt reads these lines too, to make a model per shape):
 *
 *   SHAPE(ID, STEP, COUNT, BATCH, M, N, K, TA, TB)
 *
 * C[BATCH, M, N] = op(A) op(B), op(A) [M, K] (A stored [K, M] when TA),
 * op(B) [K, N] (B stored [N, K] when TB); STEP names the training step the
 * product belongs to (mlp, gpt, none), COUNT how many times one step makes it.
 * mlp: examples/mlp_big.dt, batch 256, 784-1024-1024-10, forward and
 * backward (the products of bench/mlp.c's sgemm_step). gpt:
 * examples/transformer.dt at B 16, T 128, D 256, H 4, V 2048: the four
 * projections, the MLP, the logits, attention per head (64 = B x H products
 * of T x T x D/H), each forward with the backward's two products. rule: the
 * shapes gemm.c's choice between dtc's matmul and OpenBLAS rests on (tiny
 * cubes, thin m or n, small k). job: examples/mlp.dt at batch 64,
 * 784-256-10, the training step of examples/train_mlp.c (tools/setup.sh
 * train): the two forward products and the backward's three. */
SHAPE(mlp_fwd1, mlp, 1, 1, 256, 1024, 784, 0, 0)
SHAPE(mlp_fwd2, mlp, 1, 1, 256, 1024, 1024, 0, 0)
SHAPE(mlp_fwd3, mlp, 1, 1, 256, 10, 1024, 0, 0)
SHAPE(mlp_dw3, mlp, 1, 1, 1024, 10, 256, 1, 0)
SHAPE(mlp_dh2, mlp, 1, 1, 256, 1024, 10, 0, 1)
SHAPE(mlp_dw2, mlp, 1, 1, 1024, 1024, 256, 1, 0)
SHAPE(mlp_dh1, mlp, 1, 1, 256, 1024, 1024, 0, 1)
SHAPE(mlp_dw1, mlp, 1, 1, 784, 1024, 256, 1, 0)
SHAPE(gpt_proj, gpt, 4, 1, 2048, 256, 256, 0, 0)
SHAPE(gpt_proj_dx, gpt, 4, 1, 2048, 256, 256, 0, 1)
SHAPE(gpt_proj_dw, gpt, 4, 1, 256, 256, 2048, 1, 0)
SHAPE(gpt_up, gpt, 1, 1, 2048, 1024, 256, 0, 0)
SHAPE(gpt_up_dx, gpt, 1, 1, 2048, 256, 1024, 0, 1)
SHAPE(gpt_up_dw, gpt, 1, 1, 256, 1024, 2048, 1, 0)
SHAPE(gpt_down, gpt, 1, 1, 2048, 256, 1024, 0, 0)
SHAPE(gpt_down_dx, gpt, 1, 1, 2048, 1024, 256, 0, 1)
SHAPE(gpt_down_dw, gpt, 1, 1, 1024, 256, 2048, 1, 0)
SHAPE(gpt_logits, gpt, 1, 1, 2048, 2048, 256, 0, 0)
SHAPE(gpt_logits_dx, gpt, 1, 1, 2048, 256, 2048, 0, 1)
SHAPE(gpt_logits_dw, gpt, 1, 1, 256, 2048, 2048, 1, 0)
SHAPE(gpt_scores, gpt, 1, 64, 128, 128, 64, 0, 0)
SHAPE(gpt_scores_dq, gpt, 1, 64, 128, 64, 128, 0, 1)
SHAPE(gpt_scores_dk, gpt, 1, 64, 64, 128, 128, 1, 0)
SHAPE(gpt_attv, gpt, 1, 64, 128, 64, 128, 0, 0)
SHAPE(gpt_attv_datt, gpt, 1, 64, 128, 128, 64, 0, 1)
SHAPE(gpt_attv_dv, gpt, 1, 64, 128, 64, 128, 1, 0)
SHAPE(job_fwd1, job, 1, 1, 64, 256, 784, 0, 0)
SHAPE(job_fwd2, job, 1, 1, 64, 10, 256, 0, 0)
SHAPE(job_dw2, job, 1, 1, 256, 10, 64, 1, 0)
SHAPE(job_dh, job, 1, 1, 64, 256, 10, 0, 1)
SHAPE(job_dw1, job, 1, 1, 784, 256, 64, 1, 0)
SHAPE(square_2048, none, 1, 1, 2048, 2048, 2048, 0, 0)
SHAPE(rule_c4, rule, 1, 1, 4, 4, 4, 0, 0)
SHAPE(rule_c8, rule, 1, 1, 8, 8, 8, 0, 0)
SHAPE(rule_c12, rule, 1, 1, 12, 12, 12, 0, 0)
SHAPE(rule_c16, rule, 1, 1, 16, 16, 16, 0, 0)
SHAPE(rule_c24, rule, 1, 1, 24, 24, 24, 0, 0)
SHAPE(rule_c32, rule, 1, 1, 32, 32, 32, 0, 0)
SHAPE(rule_c48, rule, 1, 1, 48, 48, 48, 0, 0)
SHAPE(rule_c64, rule, 1, 1, 64, 64, 64, 0, 0)
SHAPE(rule_c96, rule, 1, 1, 96, 96, 96, 0, 0)
SHAPE(rule_c128, rule, 1, 1, 128, 128, 128, 0, 0)
SHAPE(rule_c256, rule, 1, 1, 256, 256, 256, 0, 0)
SHAPE(rule_c6x7x5_tb, rule, 1, 1, 6, 7, 5, 0, 1)
SHAPE(rule_n1, rule, 1, 1, 1024, 1, 1024, 0, 0)
SHAPE(rule_n2, rule, 1, 1, 1024, 2, 1024, 0, 0)
SHAPE(rule_n4, rule, 1, 1, 1024, 4, 1024, 0, 0)
SHAPE(rule_n8, rule, 1, 1, 1024, 8, 1024, 0, 0)
SHAPE(rule_n16, rule, 1, 1, 1024, 16, 1024, 0, 0)
SHAPE(rule_m1, rule, 1, 1, 1, 1024, 1024, 0, 0)
SHAPE(rule_m2, rule, 1, 1, 2, 1024, 1024, 0, 0)
SHAPE(rule_m4, rule, 1, 1, 4, 1024, 1024, 0, 0)
SHAPE(rule_m8, rule, 1, 1, 8, 1024, 1024, 0, 0)
SHAPE(rule_m16, rule, 1, 1, 16, 1024, 1024, 0, 0)
SHAPE(rule_k1, rule, 1, 1, 256, 256, 1, 0, 0)
SHAPE(rule_k4, rule, 1, 1, 256, 256, 4, 0, 0)
SHAPE(rule_k16, rule, 1, 1, 256, 256, 16, 0, 0)
SHAPE(rule_b64_c16, rule, 1, 64, 16, 16, 16, 0, 0)
