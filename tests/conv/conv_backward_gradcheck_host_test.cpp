#include "../support/host_backend.hpp"
#include "conv_backward_gradcheck.inc"
