#include "../support/cuda_backend.hpp"
#define CONV_TX gpubatch::half
#define CONV_TY gpubatch::half
#define CONV_TYPES "f16->f16"
#include "conv.inc"
