// DLPack interop on the host: views of DLTensors without a copy for every element type and
// every layout a view expresses, each rejection named, exported containers and views, the
// deleter freeing what it owns, and a GEMM on imported views against a float64 reference.
#include <gpubatch/dlpack.hpp>
#include <gpubatch/gemm.hpp>

#include "../support/catch.hpp"
#include "../support/random.hpp"
#include "../support/require_invalid.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

using gpubatch::bfloat16;
using gpubatch::from_dlpack;
using gpubatch::half;
using gpubatch::index_t;
using gpubatch::layout;
using gpubatch::matrix_batch_view;
using gpubatch::memory_space;
using gpubatch::tensor4d_view;
using gpubatch::tensor_layout;
using gpubatch::to_dlpack;
using gpubatch::test::require_invalid;

namespace {

constexpr DLDevice cpu{kDLCPU, 0};

/// A tensor's shape and strides (none given when `strides` is empty), kept alive for DLTensors.
struct tensor_desc {
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;

  DLTensor tensor(const void* data, DLDataType dtype, DLDevice device = cpu) {
    return DLTensor{const_cast<void*>(data), device, static_cast<int>(shape.size()), dtype,
                    shape.data(), strides.empty() ? nullptr : strides.data(), 0};
  }
  /// Offset of the element at `index` (one index per dimension) by the tensor's own strides.
  [[nodiscard]] std::int64_t offset(const std::vector<std::int64_t>& index) const {
    std::int64_t at = 0;
    std::int64_t compact = 1;
    for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
      at += index[i] * (strides.empty() ? compact : strides[i]);
      compact *= shape[i];
    }
    return at;
  }
  /// Elements from the first to the last (1 + the largest offset), 0 when empty.
  [[nodiscard]] std::int64_t reach() const {
    std::vector<std::int64_t> last(shape.size());
    for (std::size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == 0) return 0;
      last[i] = shape[i] - 1;
    }
    return offset(last) + 1;
  }
};

/// DLPack's type of each element type, written out independently of the library's table.
template <class T>
DLDataType expected_dtype() {
  if constexpr (std::is_same_v<T, float>) return {kDLFloat, 32, 1};
  if constexpr (std::is_same_v<T, double>) return {kDLFloat, 64, 1};
  if constexpr (std::is_same_v<T, half>) return {kDLFloat, 16, 1};
  if constexpr (std::is_same_v<T, bfloat16>) return {kDLBfloat, 16, 1};
  if constexpr (std::is_same_v<T, std::int8_t>) return {kDLInt, 8, 1};
  if constexpr (std::is_same_v<T, std::uint8_t>) return {kDLUInt, 8, 1};
  if constexpr (std::is_same_v<T, std::int32_t>) return {kDLInt, 32, 1};
  if constexpr (std::is_same_v<T, std::int64_t>) return {kDLInt, 64, 1};
}

bool same(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

/// What the host backend's containers record of an allocation: a buffer's memory is freed when
/// the record is gone.
memory_space recorded_role(const void* p) { return gpubatch::detail_shared::host_roles().find(p); }

}  // namespace

TEMPLATE_TEST_CASE("every element type crosses DLPack both ways without a copy", "[dlpack]", float,
                   double, half, bfloat16, std::int8_t, std::uint8_t, std::int32_t,
                   std::int64_t) {
  using T = TestType;
  CHECK(same(gpubatch::dlpack_dtype<T>(), expected_dtype<T>()));
  CHECK(same(gpubatch::dlpack_dtype<const T>(), expected_dtype<T>()));

  const index_t count = 2, rows = 3, cols = 5;
  gpubatch::device_buffer<T> buffer(count * rows * cols, gpubatch::on_host);
  const auto ints = gpubatch::test::random_values<int>(buffer.size(), 11, 0, 100);
  for (std::size_t i = 0; i < buffer.size(); ++i) {
    buffer.data()[i] = gpubatch::convert<T>(ints[i]);
  }
  T* const memory = buffer.data();
  REQUIRE(recorded_role(memory) == memory_space::device);

  DLManagedTensor* managed = to_dlpack(std::move(buffer), {count, rows, cols});
  CHECK(buffer.data() == nullptr);  // NOLINT(bugprone-use-after-move): moved into the tensor
  const DLTensor& t = managed->dl_tensor;
  CHECK(t.data == memory);
  CHECK(t.byte_offset == 0);
  CHECK(t.device.device_type == kDLCPU);
  CHECK(t.device.device_id == 0);
  CHECK(same(t.dtype, expected_dtype<T>()));
  REQUIRE(t.ndim == 3);
  CHECK(std::vector<std::int64_t>(t.shape, t.shape + 3) == std::vector<std::int64_t>{2, 3, 5});
  REQUIRE(t.strides != nullptr);
  CHECK(std::vector<std::int64_t>(t.strides, t.strides + 3) ==
        std::vector<std::int64_t>{15, 5, 1});

  const auto view = from_dlpack<matrix_batch_view<const T>>(managed);
  CHECK(view.data() == memory);
  CHECK(view.space() == memory_space::host);
  CHECK(view.count() == count);
  CHECK(view.rows() == rows);
  CHECK(view.cols() == cols);
  CHECK(view.order() == layout::row_major);
  CHECK(view.ld() == cols);
  CHECK(view.batch_stride() == rows * cols);
  for (index_t b = 0; b < count; ++b) {
    for (index_t i = 0; i < rows; ++i) {
      for (index_t j = 0; j < cols; ++j) {
        REQUIRE(gpubatch::convert<double>(view(b, i, j)) ==
                ints[static_cast<std::size_t>((b * rows + i) * cols + j)]);
      }
    }
  }
  const auto all = from_dlpack<gpubatch::span<T>>(managed);
  CHECK(all.data() == memory);
  CHECK(all.size() == static_cast<std::size_t>(count * rows * cols));

  managed->deleter(managed);  // frees the buffer (ASan reports a leak or a second free)
  CHECK(recorded_role(memory) == memory_space::unknown);
}

TEST_CASE("matrix batch views take every layout its strides express", "[dlpack]") {
  const std::int64_t count = GENERATE(0, 1, 3);
  const std::int64_t rows = GENERATE(0, 1, 2, 5);
  const std::int64_t cols = GENERATE(0, 1, 4);
  struct strided {
    const char* name;
    std::int64_t batch, row, col;  // 0 in all three: no strides given (C order)
  };
  const strided s = GENERATE_COPY(values<strided>({
      {"C order", 0, 0, 0},
      {"row-major, padded rows and batch", 0, cols + 2, 1},
      {"column-major (a transposed array)", 0, 1, rows},
      {"column-major, padded", 0, 1, rows + 3},
      {"broadcast batch (stride 0)", -1, cols, 1},
  }));
  tensor_desc desc{{count, rows, cols}, {}};
  if (s.row != 0) {
    const std::int64_t matrix = s.row == 1 ? s.col * cols : s.row * rows;
    const std::int64_t batch = s.batch < 0 ? 0 : matrix + 1;
    desc.strides = {batch, s.row, s.col};
    // Producers write anything as the stride of an extent-1 dimension; it must not matter.
    for (std::size_t i = 0; i < 3; ++i) {
      if (desc.shape[i] == 1) desc.strides[i] = 9999;
    }
  }
  CAPTURE(s.name, count, rows, cols, desc.strides);
  auto storage = gpubatch::test::random_values<float>(
      static_cast<std::size_t>(std::max<std::int64_t>(desc.reach(), 1)), 5);
  const DLTensor t = desc.tensor(storage.data(), expected_dtype<float>());

  const auto writable = from_dlpack<matrix_batch_view<float>>(t);
  const auto read_only = from_dlpack<matrix_batch_view<const float>>(t);
  for (const auto& view : {matrix_batch_view<const float>(writable), read_only}) {
    REQUIRE(view.count() == count);
    REQUIRE(view.rows() == rows);
    REQUIRE(view.cols() == cols);
    CHECK(view.space() == memory_space::host);
    for (std::int64_t b = 0; b < count; ++b) {
      for (std::int64_t i = 0; i < rows; ++i) {
        for (std::int64_t j = 0; j < cols; ++j) {
          REQUIRE(&view(b, i, j) == storage.data() + desc.offset({b, i, j}));
        }
      }
    }
  }
  if (count > 0 && rows > 1 && cols > 1) {  // an empty tensor's strides are never used
    CHECK(writable.order() == (s.row == 1 ? layout::col_major : layout::row_major));
  }

  // The same matrices as a 2-D tensor: a batch of one.
  tensor_desc matrix{{rows, cols}, {}};
  if (!desc.strides.empty()) matrix.strides = {desc.strides[1], desc.strides[2]};
  const auto single = from_dlpack<matrix_batch_view<float>>(matrix.tensor(storage.data(), t.dtype));
  REQUIRE(single.count() == 1);
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < cols; ++j) {
      REQUIRE(&single(0, i, j) == storage.data() + matrix.offset({i, j}));
    }
  }
}

TEST_CASE("a batch that is not the slowest dimension is a read-only view", "[dlpack]") {
  // A (rows, count, cols) array seen as (count, rows, cols): matrix b starts b rows in, so the
  // matrices interleave. A const view expresses it; a writable one would overlap.
  const std::int64_t count = 3, rows = 4, cols = 5;
  auto storage = gpubatch::test::random_values<double>(count * rows * cols, 6);
  tensor_desc desc{{count, rows, cols}, {cols, count * cols, 1}};
  const DLTensor t = desc.tensor(storage.data(), expected_dtype<double>());
  const auto view = from_dlpack<matrix_batch_view<const double>>(t);
  for (std::int64_t b = 0; b < count; ++b) {
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::int64_t j = 0; j < cols; ++j) {
        REQUIRE(&view(b, i, j) == storage.data() + desc.offset({b, i, j}));
      }
    }
  }
  require_invalid("tensor.strides", "may not overlap",
                  [&] { (void)from_dlpack<matrix_batch_view<double>>(t); });
}

TEST_CASE("tensor4d views take packed NCHW and NHWC storage in either dimension order",
          "[dlpack]") {
  const std::int64_t n = 2, h = 4, w = 5;
  const std::int64_t c = GENERATE(1, 3);
  struct form {
    const char* name;
    tensor_layout dims;     // the order of the tensor's dimensions
    tensor_layout storage;  // the order the view must report
  };
  const form f = GENERATE(values<form>({
      {"NCHW tensor, C order", tensor_layout::nchw, tensor_layout::nchw},
      {"NHWC tensor, C order (NumPy, JAX)", tensor_layout::nhwc, tensor_layout::nhwc},
      {"NCHW tensor, channels-last strides (PyTorch)", tensor_layout::nchw, tensor_layout::nhwc},
      {"NHWC tensor over NCHW storage (a transposed array)", tensor_layout::nhwc,
       tensor_layout::nchw},
  }));
  CAPTURE(f.name, c);
  const bool nhwc_dims = f.dims == tensor_layout::nhwc;
  tensor_desc desc{nhwc_dims ? std::vector<std::int64_t>{n, h, w, c}
                             : std::vector<std::int64_t>{n, c, h, w},
                   {}};
  if (f.dims != f.storage) {
    desc.strides = f.storage == tensor_layout::nhwc
                       ? std::vector<std::int64_t>{h * w * c, 1, w * c, c}  // dims N, C, H, W
                       : std::vector<std::int64_t>{c * h * w, w, 1, h * w};  // dims N, H, W, C
    if (c == 1) desc.strides[nhwc_dims ? 3 : 1] = 9999;
  }
  auto storage = gpubatch::test::random_values<float>(n * c * h * w, 7);
  const DLTensor t = desc.tensor(storage.data(), expected_dtype<float>());
  const auto view = from_dlpack<tensor4d_view<float>>(t, f.dims);
  REQUIRE(view.n() == n);
  REQUIRE(view.c() == c);
  REQUIRE(view.h() == h);
  REQUIRE(view.w() == w);
  if (c > 1) CHECK(view.order() == f.storage);
  for (std::int64_t in = 0; in < n; ++in) {
    for (std::int64_t ic = 0; ic < c; ++ic) {
      for (std::int64_t ih = 0; ih < h; ++ih) {
        for (std::int64_t iw = 0; iw < w; ++iw) {
          const std::int64_t at = nhwc_dims ? desc.offset({in, ih, iw, ic})
                                            : desc.offset({in, ic, ih, iw});
          REQUIRE(&view(in, ic, ih, iw) == storage.data() + at);
        }
      }
    }
  }
  if (f.dims == tensor_layout::nchw) {  // NCHW is what the one-argument form reads
    CHECK(from_dlpack<tensor4d_view<const float>>(t).data() == storage.data());
  }
}

TEST_CASE("spans view C-contiguous tensors of any rank", "[dlpack]") {
  std::vector<std::int32_t> storage = gpubatch::test::random_values<std::int32_t>(24, 8, -50, 50);
  tensor_desc cube{{2, 3, 4}, {}};
  auto all =
      from_dlpack<gpubatch::span<std::int32_t>>(cube.tensor(storage.data(), {kDLInt, 32, 1}));
  CHECK(all.data() == storage.data());
  CHECK(all.size() == 24);
  all[23] = 12345;  // a view, not a copy
  CHECK(storage[23] == 12345);
  tensor_desc scalar{{}, {}};
  CHECK(from_dlpack<gpubatch::span<std::int32_t>>(scalar.tensor(storage.data(), {kDLInt, 32, 1}))
            .size() == 1);
  tensor_desc empty{{3, 0}, {}};
  CHECK(from_dlpack<gpubatch::span<std::int32_t>>(empty.tensor(nullptr, {kDLInt, 32, 1}))
            .empty());
  tensor_desc padded{{2, 3}, {4, 1}};
  require_invalid("tensor.strides", "not contiguous", [&] {
    (void)from_dlpack<gpubatch::span<std::int32_t>>(padded.tensor(storage.data(), {kDLInt, 32, 1}));
  });
}

TEST_CASE("what a view cannot express is an invalid_argument naming the tensor's field",
          "[dlpack][validation]") {
  using view = matrix_batch_view<float>;
  std::vector<float> storage(64, 1.0F);
  const DLDataType f32 = expected_dtype<float>();
  tensor_desc desc{{2, 3}, {}};
  const auto importing = [&](DLTensor t) { return [t] { (void)from_dlpack<view>(t); }; };

  SECTION("device") {
    require_invalid("tensor.device", "kDLOpenCL (4)",
                    importing(desc.tensor(storage.data(), f32, DLDevice{kDLOpenCL, 0})));
    require_invalid("tensor.device", "kDLROCM (10)",
                    importing(desc.tensor(storage.data(), f32, DLDevice{kDLROCM, 0})));
    require_invalid("tensor.device", "device type (6)",
                    importing(desc.tensor(storage.data(), f32,
                                          DLDevice{static_cast<DLDeviceType>(6), 0})));
    // No machine has device 9999: with no device at all, or another current one, it is refused.
    require_invalid("tensor.device", "kDLCUDA device 9999",
                    importing(desc.tensor(storage.data(), f32, DLDevice{kDLCUDA, 9999})));
    CHECK(gpubatch::dlpack_memory_space({kDLCUDAHost, 0}) == memory_space::pinned);
    CHECK(gpubatch::dlpack_memory_space({kDLCUDAManaged, 0}) == memory_space::managed);
    CHECK(gpubatch::dlpack_memory_space({kDLCUDA, 0}) == memory_space::device);
    CHECK(from_dlpack<view>(desc.tensor(storage.data(), f32, {kDLCUDAHost, 0})).space() ==
          memory_space::pinned);
  }
  SECTION("dtype") {
    require_invalid("tensor.dtype", "float64, but the matrix_batch_view has elements of float32",
                    importing(desc.tensor(storage.data(), {kDLFloat, 64, 1})));
    require_invalid("tensor.dtype", "float32 x 4 lanes",
                    importing(desc.tensor(storage.data(), {kDLFloat, 32, 4})));
    require_invalid("tensor.dtype", "int32",
                    importing(desc.tensor(storage.data(), {kDLInt, 32, 1})));
    require_invalid("tensor.dtype", "complex64",
                    importing(desc.tensor(storage.data(), {kDLComplex, 64, 1})));
    require_invalid("tensor.dtype", "bfloat16, but the matrix_batch_view has elements of float16",
                    [&] {
                      (void)from_dlpack<matrix_batch_view<half>>(
                          desc.tensor(storage.data(), {kDLBfloat, 16, 1}));
                    });
    require_invalid("tensor.dtype", "uint8", [&] {
      (void)from_dlpack<matrix_batch_view<std::int8_t>>(
          desc.tensor(storage.data(), {kDLUInt, 8, 1}));
    });
  }
  SECTION("ndim") {
    tensor_desc four{{1, 2, 3, 4}, {}};
    require_invalid("tensor.ndim", "4 dimensions", importing(four.tensor(storage.data(), f32)));
    tensor_desc one{{6}, {}};
    require_invalid("tensor.ndim", "1 dimensions", importing(one.tensor(storage.data(), f32)));
    require_invalid("tensor.ndim", "2 dimensions, but a tensor4d_view views 4",
                    [&] {
                      (void)from_dlpack<tensor4d_view<float>>(desc.tensor(storage.data(), f32));
                    });
  }
  SECTION("shape") {
    DLTensor no_shape = desc.tensor(storage.data(), f32);
    no_shape.shape = nullptr;
    require_invalid("tensor.shape", "null pointer", importing(no_shape));
    tensor_desc negative{{2, -3}, {}};
    require_invalid("tensor.shape", "extent -3 of dimension 1 in (2, -3)",
                    importing(negative.tensor(storage.data(), f32)));
    const std::int64_t big = std::int64_t{1} << 40;
    tensor_desc huge{{big, big}, {}};
    require_invalid("tensor.shape", "int64", importing(huge.tensor(storage.data(), f32)));
    tensor_desc far{{2, 2}, {std::int64_t{1} << 62, 1}};
    require_invalid("tensor.shape", "int64", importing(far.tensor(storage.data(), f32)));
  }
  SECTION("strides") {
    tensor_desc reversed{{2, 3}, {-3, 1}};
    require_invalid("tensor.strides", "stride -3 of dimension 0 in (-3, 1) is negative",
                    importing(reversed.tensor(storage.data() + 3, f32)));
    tensor_desc every_other{{2, 3}, {6, 2}};
    require_invalid("tensor.strides", "neither row-major",
                    importing(every_other.tensor(storage.data(), f32)));
    tensor_desc short_columns{{4, 3}, {1, 2}};  // column stride 2 < 4 rows: columns overlap
    require_invalid("tensor.strides", "column stride at least 4",
                    importing(short_columns.tensor(storage.data(), f32)));
    tensor_desc broadcast_rows{{4, 3}, {0, 1}};
    require_invalid("tensor.strides", "(0, 1)",
                    importing(broadcast_rows.tensor(storage.data(), f32)));
    tensor_desc overlapping{{2, 3, 4}, {5, 4, 1}};
    require_invalid("tensor.strides", "batch stride 5",
                    importing(overlapping.tensor(storage.data(), f32)));
    CHECK_NOTHROW(
        from_dlpack<matrix_batch_view<const float>>(overlapping.tensor(storage.data(), f32)));
    tensor_desc strided4d{{1, 2, 3, 4}, {24, 12, 4, 2}};
    require_invalid("tensor.strides", "neither packed NCHW nor packed NHWC", [&] {
      (void)from_dlpack<tensor4d_view<float>>(strided4d.tensor(storage.data(), f32));
    });
  }
  SECTION("data") {
    require_invalid("tensor.data", "null pointer for a tensor spanning 6 elements",
                    importing(desc.tensor(nullptr, f32)));
    DLTensor misaligned = desc.tensor(storage.data(), f32);
    misaligned.byte_offset = 2;
    require_invalid("tensor.data", "not aligned to the 4 bytes of float32", importing(misaligned));
    DLTensor offset = desc.tensor(storage.data(), f32);
    offset.byte_offset = 8;  // two floats in: byte_offset is honoured
    CHECK(from_dlpack<view>(offset).data() == storage.data() + 2);
  }
  SECTION("managed tensor") {
    require_invalid("tensor", "null DLManagedTensor",
                    [] { (void)from_dlpack<view>(static_cast<const DLManagedTensor*>(nullptr)); });
  }
}

TEST_CASE("to_dlpack checks shape and strides, and leaves the container with the caller on failure",
          "[dlpack][validation]") {
  gpubatch::pinned_buffer<double> buffer(12, gpubatch::on_host);
  double* const memory = buffer.data();
  require_invalid("shape", "extent -4 of dimension 1",
                  [&] { (void)to_dlpack(std::move(buffer), {3, -4}); });
  require_invalid("strides", "1 strides for 2 dimensions",
                  [&] { (void)to_dlpack(std::move(buffer), {3, 4}, {1}); });
  require_invalid("strides", "stride -1",
                  [&] { (void)to_dlpack(std::move(buffer), {3, 4}, {-1, 3}); });
  require_invalid("container", "holds 12 elements, but a tensor of shape (3, 5)",
                  [&] { (void)to_dlpack(std::move(buffer), {3, 5}); });
  require_invalid("container", "reaches 15",
                  [&] { (void)to_dlpack(std::move(buffer), {3, 4}, {1, 4}); });
  CHECK(buffer.data() == memory);  // NOLINT(bugprone-use-after-move): every call threw first
  CHECK(buffer.size() == 12);

  // Column-major strides: the importer sees the transposed layout.
  DLManagedTensor* managed = to_dlpack(std::move(buffer), {3, 4}, {1, 3});
  CHECK(managed->dl_tensor.device.device_type == kDLCPU);
  const auto view = from_dlpack<matrix_batch_view<double>>(managed);
  CHECK(view.data() == memory);
  CHECK(view.order() == layout::col_major);
  CHECK(view.ld() == 3);
  CHECK(recorded_role(memory) == memory_space::pinned);
  managed->deleter(managed);
  CHECK(recorded_role(memory) == memory_space::unknown);

  // An empty container exports an empty tensor.
  gpubatch::device_buffer<float> none(0, gpubatch::on_host);
  DLManagedTensor* empty = to_dlpack(std::move(none), {0, 7});
  CHECK(empty->dl_tensor.shape[0] == 0);
  CHECK(from_dlpack<matrix_batch_view<float>>(empty).count() == 1);
  empty->deleter(empty);
}

TEST_CASE("exported views describe their memory and leave it to its owner", "[dlpack]") {
  auto storage = gpubatch::test::random_values<float>(2 * 3 * 6 + 1, 9);
  const matrix_batch_view<float> padded(storage.data(), 3, 4, 6, 19, 2, layout::row_major,
                                        memory_space::host);
  DLManagedTensor* m = to_dlpack(padded);
  CHECK(m->dl_tensor.data == storage.data());
  CHECK(m->dl_tensor.device.device_type == kDLCPU);
  CHECK(std::vector<std::int64_t>(m->dl_tensor.shape, m->dl_tensor.shape + 3) ==
        std::vector<std::int64_t>{2, 3, 4});
  CHECK(std::vector<std::int64_t>(m->dl_tensor.strides, m->dl_tensor.strides + 3) ==
        std::vector<std::int64_t>{19, 6, 1});
  const auto back = from_dlpack<matrix_batch_view<float>>(m);
  CHECK(back.ld() == 6);
  CHECK(back.batch_stride() == 19);
  m->deleter(m);  // the struct only: the memory stays the vector's
  storage[0] = 3.0F;

  const matrix_batch_view<const float> transposed(storage.data(), 3, 4, 5, 0, 1, layout::col_major);
  DLManagedTensor* t = to_dlpack(transposed);
  CHECK(std::vector<std::int64_t>(t->dl_tensor.strides, t->dl_tensor.strides + 3) ==
        std::vector<std::int64_t>{0, 1, 5});
  CHECK(t->dl_tensor.device.device_type == kDLCPU);  // unknown space, classified as host
  t->deleter(t);

  const tensor4d_view<float> nhwc(storage.data(), 1, 3, 2, 2, tensor_layout::nhwc);
  DLManagedTensor* x = to_dlpack(nhwc);
  CHECK(std::vector<std::int64_t>(x->dl_tensor.shape, x->dl_tensor.shape + 4) ==
        std::vector<std::int64_t>{1, 3, 2, 2});
  CHECK(std::vector<std::int64_t>(x->dl_tensor.strides, x->dl_tensor.strides + 4) ==
        std::vector<std::int64_t>{12, 1, 6, 3});  // channels last, as PyTorch writes it
  CHECK(from_dlpack<tensor4d_view<float>>(x).order() == tensor_layout::nhwc);
  x->deleter(x);

  DLManagedTensor* s = to_dlpack(gpubatch::span<const float>(storage));
  CHECK(s->dl_tensor.ndim == 1);
  CHECK(s->dl_tensor.shape[0] == static_cast<std::int64_t>(storage.size()));
  s->deleter(s);
}

TEMPLATE_TEST_CASE("gemm on imported views matches a float64 reference", "[dlpack][gemm]", float,
                   double) {
  using T = TestType;
  const std::int64_t count = 3, m = 5, n = 6, k = 7;
  // A: C order (count, m, k). B: stored as (count, n, k) and handed over transposed, as
  // NumPy's b.transpose(0, 2, 1) would be: shape (count, k, n), column-major matrices.
  auto a = gpubatch::test::random_values<T>(count * m * k, 21);
  auto b = gpubatch::test::random_values<T>(count * n * k, 22);
  tensor_desc a_desc{{count, m, k}, {}};
  tensor_desc b_desc{{count, k, n}, {n * k, 1, k}};
  using view = matrix_batch_view<const T>;
  const auto av = from_dlpack<view>(a_desc.tensor(a.data(), expected_dtype<T>()));
  const auto bv = from_dlpack<view>(b_desc.tensor(b.data(), expected_dtype<T>()));
  REQUIRE(bv.order() == layout::col_major);

  gpubatch::device_buffer<T> c_buffer(count * m * n, gpubatch::on_host);
  for (std::size_t i = 0; i < c_buffer.size(); ++i) {
    c_buffer.data()[i] = std::numeric_limits<T>::quiet_NaN();  // poison: every element written
  }
  DLManagedTensor* c_tensor = to_dlpack(std::move(c_buffer), {count, m, n});
  const auto cv = from_dlpack<matrix_batch_view<T>>(c_tensor);
  gpubatch::gemm(gpubatch::on_host, gpubatch::op::none, gpubatch::op::none, T(1), av, bv, T(0), cv);

  double error = 0, norm = 0;
  for (std::int64_t p = 0; p < count; ++p) {
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double expected = 0;
        for (std::int64_t l = 0; l < k; ++l) {
          expected += static_cast<double>(a[(p * m + i) * k + l]) *
                      static_cast<double>(b[(p * n + j) * k + l]);
        }
        const auto* out = static_cast<const T*>(c_tensor->dl_tensor.data);
        const double got = static_cast<double>(out[(p * m + i) * n + j]);
        REQUIRE(std::isfinite(got));
        error += (got - expected) * (got - expected);
        norm += expected * expected;
      }
    }
  }
  CHECK(std::sqrt(error / norm) < (std::is_same_v<T, float> ? 1e-6 : 1e-14));
  c_tensor->deleter(c_tensor);
}
