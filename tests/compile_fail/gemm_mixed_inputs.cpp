// A and B of different element types are rejected at compile time.
#include <gpubatch/gemm.hpp>

int main() {
  float a[4] = {};
  double b[4] = {};
  float c[4] = {};
  gpubatch::gemm(gpubatch::on_host, gpubatch::op::none, gpubatch::op::none, 1.0F,
                 gpubatch::matrix_batch_view<const float>(a, 2, 2, 2, 4, 1),
                 gpubatch::matrix_batch_view<const double>(b, 2, 2, 2, 4, 1), 0.0F,
                 gpubatch::matrix_batch_view<float>(c, 2, 2, 2, 4, 1));
}
