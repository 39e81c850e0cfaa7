#include "../support/host_backend.hpp"
#define BWD_T gpubatch::half
#define BWD_TG gpubatch::half
#define BWD_TYPES "f16"
#include "conv_backward.inc"
