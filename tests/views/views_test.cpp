#include <gpubatch/containers.hpp>
#include <gpubatch/views.hpp>

#include "../support/catch.hpp"
#include "../support/require_invalid.hpp"

#include <string>
#include <type_traits>
#include <vector>

#include "../support/random.hpp"

using gpubatch::index_t;
using gpubatch::layout;
using gpubatch::matrix_batch_view;
using gpubatch::tensor_layout;
using gpubatch::tensor4d_view;

using gpubatch::test::require_invalid;

TEST_CASE("views are trivially copyable, as kernel arguments must be", "[views]") {
  STATIC_REQUIRE(std::is_trivially_copyable_v<matrix_batch_view<float>>);
  STATIC_REQUIRE(std::is_trivially_copyable_v<gpubatch::pointer_matrix_batch_view<const float>>);
  STATIC_REQUIRE(std::is_trivially_copyable_v<tensor4d_view<double>>);
}

TEST_CASE("matrix_batch_view indexes row- and column-major batches", "[views]") {
  const index_t rows = GENERATE(1, 3, 17);
  const index_t cols = GENERATE(1, 4, 33);
  const layout order = GENERATE(layout::row_major, layout::col_major);
  const index_t minor = order == layout::row_major ? cols : rows;
  const index_t ld = minor + 5;  // padded leading dimension
  const index_t count = 3;
  const index_t stride = ld * (order == layout::row_major ? rows : cols) + 7;
  auto storage = gpubatch::test::random_values<float>(static_cast<std::size_t>(stride * count), 1);

  const matrix_batch_view<float> view(storage, rows, cols, ld, stride, count, order);
  CHECK(view.rows() == rows);
  CHECK(view.cols() == cols);
  CHECK(view.ld() == ld);
  CHECK(view.space() == gpubatch::memory_space::host);
  for (index_t b = 0; b < count; ++b) {
    const auto m = view.matrix(b);
    for (index_t i = 0; i < rows; ++i) {
      for (index_t j = 0; j < cols; ++j) {
        const index_t expected = b * stride + (order == layout::row_major ? i * ld + j : i + j * ld);
        REQUIRE(view.offset(b, i, j) == expected);
        REQUIRE(&view(b, i, j) == storage.data() + expected);
        REQUIRE(&m(i, j) == storage.data() + expected);
      }
    }
  }
  CHECK(view.required_span_size() == (count - 1) * stride + view.matrix_span());
}

TEST_CASE("a batch stride of 0 broadcasts one matrix", "[views]") {
  std::vector<double> storage = gpubatch::test::random_values<double>(6, 2);
  const matrix_batch_view<const double> view(storage.data(), 2, 3, 3, 0, 1000);
  CHECK(&view(999, 1, 2) == &storage[5]);
  CHECK(view.required_span_size() == 6);
}

TEST_CASE("offsets are 64-bit: a batch may exceed 2^31 elements", "[views]") {
  float dummy = 0;  // never dereferenced: only index math is checked
  const index_t n = 4096;
  const matrix_batch_view<float> view =
      matrix_batch_view<float>::packed(&dummy, n, n, /*count=*/1024);
  CHECK(view.offset(1023, n - 1, n - 1) == 1024LL * n * n - 1);
  CHECK(view.required_span_size() == 1024LL * n * n);
  CHECK(view.required_span_size() > (1LL << 32));
}

TEST_CASE("matrix_batch_view validation names the parameter", "[views]") {
  std::vector<float> storage(64, 1.0F);
  float* const data = storage.data();
  require_invalid("rows", [&] { matrix_batch_view<float>(data, -1, 2, 2, 4, 1); });
  require_invalid("cols", [&] { matrix_batch_view<float>(data, 2, -2, 2, 4, 1); });
  require_invalid("ld", [&] { matrix_batch_view<float>(data, 2, 4, 3, 8, 1); });
  require_invalid("ld", [&] { matrix_batch_view<float>(data, 4, 2, 3, 8, 1, layout::col_major); });
  require_invalid("ld", [&] { matrix_batch_view<float>(data, 0, 0, 0, 0, 1); });
  require_invalid("batch_stride", [&] { matrix_batch_view<float>(data, 2, 2, 2, -4, 2); });
  require_invalid("batch_stride", [&] { matrix_batch_view<float>(data, 2, 2, 2, 3, 2); });
  require_invalid("count", [&] { matrix_batch_view<float>(data, 2, 2, 2, 4, -1); });
  require_invalid("data", [&] { matrix_batch_view<float>(nullptr, 2, 2, 2, 4, 1); });
  require_invalid("container", [&] { matrix_batch_view<float>(storage, 4, 4, 4, 16, 5); });
  // Read-only matrices may overlap (a sliding window); empty views need no data.
  CHECK_NOTHROW(matrix_batch_view<const float>(data, 2, 2, 2, 1, 4));
  CHECK_NOTHROW(matrix_batch_view<float>(nullptr, 0, 5, 5, 0, 3));
  CHECK_NOTHROW(matrix_batch_view<float>(nullptr, 5, 5, 5, 25, 0));
}

TEST_CASE("views build from gpubatch containers and keep their memory space", "[views]") {
  gpubatch::device_buffer<int> buffer(24, gpubatch::on_host);
  const auto view = matrix_batch_view<int>::packed(buffer, 2, 3, 4);
  CHECK(view.data() == buffer.data());
  CHECK(view.space() == gpubatch::memory_space::host);
  const matrix_batch_view<const int> read_only = view;  // writable converts to read-only
  CHECK(read_only.data() == buffer.data());
  CHECK(read_only.count() == 4);
}

TEST_CASE("pointer_matrix_batch_view indexes each matrix through its own pointer", "[views]") {
  std::vector<float> a = gpubatch::test::random_values<float>(12, 3);
  std::vector<float> b = gpubatch::test::random_values<float>(12, 4);
  float* const pointers[] = {a.data(), b.data()};
  const gpubatch::pointer_matrix_batch_view<float> view(pointers, 3, 4, 4, 2, layout::col_major);
  CHECK(&view(0, 2, 1) == &a[2 + 1 * 4]);
  CHECK(&view(1, 1, 3) == &b[1 + 3 * 4]);
  CHECK(&view.matrix(1)(0, 0) == b.data());
  require_invalid("pointers",
                  [] { gpubatch::pointer_matrix_batch_view<float>(nullptr, 3, 4, 4, 2); });
  require_invalid("ld", [&] { gpubatch::pointer_matrix_batch_view<float>(pointers, 3, 4, 2, 2); });
}

TEST_CASE("tensor4d_view indexes NCHW and NHWC by logical (n, c, h, w)", "[views]") {
  const index_t n = 2, c = 3, h = 5, w = 7;
  std::vector<float> storage = gpubatch::test::random_values<float>(n * c * h * w, 5);
  const tensor4d_view<float> nchw(storage, n, c, h, w, tensor_layout::nchw);
  const tensor4d_view<float> nhwc(storage, n, c, h, w, tensor_layout::nhwc);
  CHECK(nchw.size() == n * c * h * w);
  for (index_t in = 0; in < n; ++in)
    for (index_t ic = 0; ic < c; ++ic)
      for (index_t ih = 0; ih < h; ++ih)
        for (index_t iw = 0; iw < w; ++iw) {
          REQUIRE(nchw.offset(in, ic, ih, iw) == ((in * c + ic) * h + ih) * w + iw);
          REQUIRE(nhwc.offset(in, ic, ih, iw) == ((in * h + ih) * w + iw) * c + ic);
        }
  CHECK(&nhwc.mdspan()(1, 2, 4, 6) == &storage.back());
  const tensor4d_view<const float> read_only = nhwc;
  CHECK(read_only.order() == tensor_layout::nhwc);
}

TEST_CASE("tensor4d_view validation names the parameter", "[views]") {
  std::vector<float> storage(16, 1.0F);
  require_invalid("n", [&] { tensor4d_view<float>(storage.data(), -1, 1, 1, 1, tensor_layout::nchw); });
  require_invalid("w", [&] { tensor4d_view<float>(storage.data(), 1, 1, 1, -3, tensor_layout::nhwc); });
  require_invalid("data", [] { tensor4d_view<float>(nullptr, 1, 2, 2, 2, tensor_layout::nchw); });
  require_invalid("container", [&] { tensor4d_view<float>(storage, 1, 2, 3, 3, tensor_layout::nchw); });
  CHECK_NOTHROW(tensor4d_view<float>(nullptr, 0, 3, 3, 3, tensor_layout::nhwc));
}
