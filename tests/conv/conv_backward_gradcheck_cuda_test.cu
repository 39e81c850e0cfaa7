#include "../support/cuda_backend.hpp"
#include "conv_backward_gradcheck.inc"
