#include "../support/host_backend.hpp"
#define BWD_T gpubatch::bfloat16
#define BWD_TG gpubatch::bfloat16
#define BWD_TYPES "bf16"
#include "conv_backward.inc"
