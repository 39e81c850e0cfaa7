#include "../support/cuda_backend.hpp"

#include "conv_epilogue.inc"
