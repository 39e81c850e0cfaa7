// A consumer's own library: gpubatch types in its interface, so it links gpubatch PUBLIC.
#pragma once

#include <gpubatch/transfer.hpp>

namespace consumer {

/// The sum of `values`, computed by a host-backend GEMM with a vector of ones.
float sum(gpubatch::span<const float> values);

}  // namespace consumer
