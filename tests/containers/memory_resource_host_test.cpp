#include "../support/host_backend.hpp"

#include "memory_resource.inc"
