/* cnn_as_mlp.h: examples/cnn.dt's header under the names train_mlp.c uses,
 * so that one program trains either model (examples/CMakeLists.txt builds it
 * twice: train_mlp and, with DTC_MODEL_H naming this file, train_cnn). */
#include "cnn.h"

#define mlp cnn
#define MLP_BATCH CNN_BATCH
#define mlp_create cnn_create
#define mlp_destroy cnn_destroy
#define mlp_train_step cnn_train_step
#define mlp_forward cnn_forward
#define mlp_save cnn_save
#define mlp_load cnn_load
#define mlp_step cnn_step
#define mlp_error cnn_error
#define mlp_rank cnn_rank
#define mlp_input_rows cnn_input_rows
#define mlp_train_step_local cnn_train_step_local
#define mlp_forward_local cnn_forward_local
