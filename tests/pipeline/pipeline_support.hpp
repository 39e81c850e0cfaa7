// The compute stage of the pipeline tests, on both backends: every output element depends on
// its item's input and on the item's index in the whole batch, so a misplaced, reordered or
// unwritten chunk changes the result. The stage also round-trips through its workspace.
#pragma once

#include <gpubatch/gpubatch.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gpubatch::test {

using in_t = std::int32_t;
using out_t = std::int64_t;

/// out(item, j) = 3 * in(item, j % I) + global item index, for I inputs and O outputs per item.
inline out_t expected_value(const std::vector<in_t>& input, std::size_t in_per_item,
                            std::size_t out_per_item, std::size_t item, std::size_t j) {
  (void)out_per_item;
  return 3 * static_cast<out_t>(input[item * in_per_item + j % in_per_item]) +
         static_cast<out_t>(item);
}

inline std::vector<out_t> expected_output(const std::vector<in_t>& input, std::size_t in_per_item,
                                          std::size_t out_per_item) {
  const std::size_t items = input.size() / in_per_item;
  std::vector<out_t> out(items * out_per_item);
  for (std::size_t i = 0; i < items; ++i) {
    for (std::size_t j = 0; j < out_per_item; ++j) {
      out[i * out_per_item + j] = expected_value(input, in_per_item, out_per_item, i, j);
    }
  }
  return out;
}

#if GPUBATCH_CUDA_COMPILER
__global__ void transform_items_kernel(const in_t* in, out_t* out, in_t* workspace,
                                       std::size_t items, std::size_t in_per_item,
                                       std::size_t out_per_item, std::size_t first_item) {
  const std::size_t e = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= items * out_per_item) {
    return;
  }
  const std::size_t i = e / out_per_item;
  const std::size_t j = e % out_per_item;
  in_t v = in[i * in_per_item + j % in_per_item];
  if (workspace != nullptr) {
    workspace[e] = v;  // each thread its own workspace element
    v = workspace[e];
  }
  out[e] = 3 * static_cast<out_t>(v) + static_cast<out_t>(first_item + i);
}
#endif

/// The stage: a kernel on the CUDA backend, a loop on the host backend.
struct transform_items {
  std::size_t in_per_item;
  std::size_t out_per_item;

  template <class Exec>
  void operator()(Exec exec, const pipeline_chunk<in_t, out_t>& c) const {
    in_t* const workspace = c.workspace.empty() ? nullptr : c.template workspace_as<in_t>().data();
    if constexpr (is_cuda_exec_v<Exec>) {
#if GPUBATCH_CUDA_COMPILER
      const std::size_t total = c.items * out_per_item;
      const unsigned blocks = static_cast<unsigned>((total + 255) / 256);
      gpubatch::launch(transform_items_kernel, gpubatch::launch_config{blocks, 256, 0, exec.stream()},
                       c.input.data(), c.output.data(), workspace, c.items, in_per_item,
                       out_per_item, c.first_item);
#endif
    } else {
      (void)exec;
      for (std::size_t i = 0; i < c.items; ++i) {
        for (std::size_t j = 0; j < out_per_item; ++j) {
          in_t v = c.input[i * in_per_item + j % in_per_item];
          if (workspace != nullptr) {
            workspace[i * out_per_item + j] = v;
            v = workspace[i * out_per_item + j];
          }
          c.output[i * out_per_item + j] =
              3 * static_cast<out_t>(v) + static_cast<out_t>(c.first_item + i);
        }
      }
    }
  }
};

}  // namespace gpubatch::test
