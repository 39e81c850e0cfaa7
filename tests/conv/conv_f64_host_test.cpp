#include "../support/host_backend.hpp"
#define CONV_TX double
#define CONV_TY double
#define CONV_TYPES "f64->f64"
#include "conv.inc"
