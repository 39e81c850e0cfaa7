#include "../support/cuda_backend.hpp"
#define BWD_T float
#define BWD_TG float
#define BWD_TYPES "f32"
#include "conv_backward.inc"
