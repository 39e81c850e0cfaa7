#include "../support/cuda_backend.hpp"
#define CONV_TX gpubatch::bfloat16
#define CONV_TY gpubatch::bfloat16
#define CONV_TYPES "bf16->bf16"
#include "conv.inc"
