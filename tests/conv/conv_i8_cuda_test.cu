#include "../support/cuda_backend.hpp"
#define CONV_TX std::int8_t
#define CONV_TY std::int32_t
#define CONV_TYPES "i8->i32"
#include "conv.inc"
