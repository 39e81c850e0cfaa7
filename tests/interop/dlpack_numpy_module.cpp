// The native half of the NumPy round trip (dlpack_numpy_test.py), loaded with ctypes: C
// functions that take NumPy's DLManagedTensors, compute with gpubatch on views of their memory,
// and hand results back as tensors gpubatch exported. No Python headers are needed.
//
// Each function owns the tensors it is given (the caller marked their capsules used): it calls
// their deleters when done, on success and on error alike. A failure returns nonzero and writes
// the exception's message to `message`.
#include <gpubatch/dlpack.hpp>
#include <gpubatch/gemm.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <utility>

namespace {

std::atomic<int> live_exports{0};

/// Calls a consumed tensor's deleter when the function returns, however it returns.
class owned {
 public:
  explicit owned(DLManagedTensor* t) noexcept : tensor_(t) {}
  owned(const owned&) = delete;
  owned& operator=(const owned&) = delete;
  ~owned() {
    if (tensor_ != nullptr && tensor_->deleter != nullptr) {
      tensor_->deleter(tensor_);
    }
  }
  [[nodiscard]] const DLManagedTensor* get() const noexcept { return tensor_; }

 private:
  DLManagedTensor* tensor_;
};

void counted_deleter(DLManagedTensor* self) {
  auto* inner = static_cast<DLManagedTensor*>(self->manager_ctx);
  inner->deleter(inner);
  delete self;
  --live_exports;
}

/// gpubatch's export, wrapped so the test can see the consumer delete it: this tensor's
/// deleter runs gpubatch's, then counts.
DLManagedTensor* counted(DLManagedTensor* inner) {
  DLManagedTensor* outer = nullptr;
  try {
    outer = new DLManagedTensor{inner->dl_tensor, inner, &counted_deleter};
  } catch (...) {
    inner->deleter(inner);
    throw;
  }
  ++live_exports;
  return outer;
}

template <class F>
int report(char* message, std::size_t size, F&& body) {
  try {
    body();
    return 0;
  } catch (const std::exception& e) {
    if (message != nullptr && size > 0) {
      std::strncpy(message, e.what(), size - 1);
      message[size - 1] = '\0';
    }
    return 1;
  }
}

bool is_float64(const DLManagedTensor* t) {
  return t != nullptr && t->dl_tensor.dtype.code == kDLFloat && t->dl_tensor.dtype.bits == 64;
}

/// C = A * B for 2-D (m x k, k x n) or 3-D (batch of them) tensors, into a new container.
template <class T>
DLManagedTensor* gemm(const DLManagedTensor* a, const DLManagedTensor* b) {
  using view = gpubatch::matrix_batch_view<const T>;
  const auto av = gpubatch::from_dlpack<view>(a);
  const auto bv = gpubatch::from_dlpack<view>(b);
  const gpubatch::index_t count = av.count(), m = av.rows(), n = bv.cols();
  gpubatch::device_buffer<T> c(static_cast<std::size_t>(count * m * n), gpubatch::on_host);
  const auto cv = gpubatch::matrix_batch_view<T>::packed(c, m, n, count);
  gpubatch::gemm(gpubatch::on_host, gpubatch::op::none, gpubatch::op::none, T(1), av, bv, T(0),
                 cv);
  if (a->dl_tensor.ndim == 2) {
    return counted(gpubatch::to_dlpack(std::move(c), {m, n}));
  }
  return counted(gpubatch::to_dlpack(std::move(c), {count, m, n}));
}

/// x *= alpha in place, through a view of x's own memory.
template <class T>
void scale(const DLManagedTensor* x, double alpha) {
  const auto v = gpubatch::from_dlpack<gpubatch::matrix_batch_view<T>>(x);
  for (gpubatch::index_t b = 0; b < v.count(); ++b) {
    for (gpubatch::index_t i = 0; i < v.rows(); ++i) {
      for (gpubatch::index_t j = 0; j < v.cols(); ++j) {
        v(b, i, j) = static_cast<T>(v(b, i, j) * alpha);
      }
    }
  }
}

}  // namespace

extern "C" {

/// *out = A * B (float32 or float64; other types are refused by the import, naming them).
__attribute__((visibility("default"))) int gpubatch_dlpack_gemm(DLManagedTensor* a_tensor,
                                                                DLManagedTensor* b_tensor,
                                                                DLManagedTensor** out,
                                                                char* message, std::size_t size) {
  const owned a(a_tensor), b(b_tensor);
  return report(message, size, [&] {
    *out = is_float64(a.get()) ? gemm<double>(a.get(), b.get()) : gemm<float>(a.get(), b.get());
  });
}

/// x *= alpha, in x's memory.
__attribute__((visibility("default"))) int gpubatch_dlpack_scale(DLManagedTensor* x_tensor,
                                                                 double alpha, char* message,
                                                                 std::size_t size) {
  const owned x(x_tensor);
  return report(message, size, [&] {
    if (is_float64(x.get())) {
      scale<double>(x.get(), alpha);
    } else {
      scale<float>(x.get(), alpha);
    }
  });
}

/// Tensors this library exported that no consumer has deleted yet.
__attribute__((visibility("default"))) int gpubatch_dlpack_live_exports() {
  return live_exports.load();
}

/// The DLPack device type of a tensor, for __dlpack_device__.
__attribute__((visibility("default"))) int gpubatch_dlpack_device_type(const DLManagedTensor* t) {
  return static_cast<int>(t->dl_tensor.device.device_type);
}

/// The first element of a tensor, to check that a consumer reads it in place.
__attribute__((visibility("default"))) const void* gpubatch_dlpack_data(const DLManagedTensor* t) {
  return static_cast<const char*>(t->dl_tensor.data) + t->dl_tensor.byte_offset;
}

/// Deletes a tensor no consumer took (its capsule was never consumed).
__attribute__((visibility("default"))) void gpubatch_dlpack_delete(DLManagedTensor* t) {
  if (t != nullptr && t->deleter != nullptr) {
    t->deleter(t);
  }
}

}  // extern "C"
