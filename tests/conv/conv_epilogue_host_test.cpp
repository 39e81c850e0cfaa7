#include "../support/host_backend.hpp"

#include "conv_epilogue.inc"
