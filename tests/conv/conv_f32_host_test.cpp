#include "../support/host_backend.hpp"
#define CONV_TX float
#define CONV_TY float
#define CONV_TYPES "f32->f32"
#include "conv.inc"
