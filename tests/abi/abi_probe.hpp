// The mixed-flags link test: the same gpubatch calls compiled into several translation units
// with different instruction sets, OpenMP settings and compilers, linked into one program. Each
// probe receives the problems through gpubatch's public types (so those types must be the same
// type in every translation unit) and reports its ABI namespace and the layouts it sees.
#pragma once

#include <gpubatch/conv_problem.hpp>
#include <gpubatch/views.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace abi_test {

/// The problems every probe solves, on the host backend, into its own outputs.
struct problems {
  // f32: C = A * B, 100 x 77 x 300, 2 matrices (row-major).
  gpubatch::matrix_batch_view<const float> a32;
  gpubatch::matrix_batch_view<const float> b32;
  gpubatch::matrix_batch_view<float> c32;
  // f64: C = A^T * B, 65 x 33 x 129, 3 matrices (column-major).
  gpubatch::matrix_batch_view<const double> a64;
  gpubatch::matrix_batch_view<const double> b64;
  gpubatch::matrix_batch_view<double> c64;
  // f32 convolution, NHWC, 3 x 3, padding 1.
  gpubatch::conv2d_params params;
  gpubatch::tensor4d_view<const float> x;
  gpubatch::tensor4d_view<const float> w;
  gpubatch::tensor4d_view<float> y;
};

struct probe_report {
  std::string abi_namespace;          ///< GPUBATCH_ABI_NAMESPACE as the probe saw it
  std::vector<std::size_t> layouts;   ///< sizeof and alignof of public types
};

/// The sizes and alignments of the public types a user passes between files.
std::vector<std::size_t> public_type_layouts();

}  // namespace abi_test

// One probe per build configuration; each is defined by abi_probe.inc in its own file.
abi_test::probe_report abi_probe_baseline(const abi_test::problems& p);
abi_test::probe_report abi_probe_native(const abi_test::problems& p);
abi_test::probe_report abi_probe_nvcc(const abi_test::problems& p);
