#include "../support/cuda_backend.hpp"

#include "memory_resource.inc"
