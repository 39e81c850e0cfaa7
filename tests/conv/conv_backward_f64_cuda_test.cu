#include "../support/cuda_backend.hpp"
#define BWD_T double
#define BWD_TG double
#define BWD_TYPES "f64"
#include "conv_backward.inc"
