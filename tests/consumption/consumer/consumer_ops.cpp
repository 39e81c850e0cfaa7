#include "consumer_ops.hpp"

#include <gpubatch/gemm.hpp>

#include <vector>

namespace consumer {

float sum(gpubatch::span<const float> values) {
  const auto n = static_cast<gpubatch::index_t>(values.size());
  if (n == 0) return 0.0F;
  const std::vector<float> ones(values.size(), 1.0F);
  std::vector<float> result(1);
  // (1 x n) * (n x 1): one problem.
  const gpubatch::matrix_batch_view<const float> row(values.data(), 1, n, n, 0, 1);
  const auto column = gpubatch::matrix_batch_view<const float>::packed(ones, n, 1, 1);
  const auto out = gpubatch::matrix_batch_view<float>::packed(result, 1, 1, 1);
  gpubatch::gemm(gpubatch::on_host, gpubatch::op::none, gpubatch::op::none, 1.0F, row, column,
                 0.0F, out);
  return result[0];
}

}  // namespace consumer
