/// @file detail/dlpack/export.hpp
/// @brief to_dlpack: a DLManagedTensor whose manager context holds its shape and strides and,
/// for a container, the container itself; one deleter frees the context, and with it all.
#pragma once

#include <gpubatch/containers.hpp>
#include <gpubatch/detail/dlpack/dlpack.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/memory_space.hpp>
#include <gpubatch/transfer.hpp>
#include <gpubatch/views.hpp>

#include <cuda_runtime_api.h>
#include <dlpack/dlpack.h>

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

GPUBATCH_NAMESPACE_BEGIN
namespace detail::dlpack {

/// The manager context of every exported tensor. The DLManagedTensor is a member, so the
/// context and the tensor are one allocation, freed by one delete.
struct export_context {
  DLManagedTensor managed{};
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;

  export_context() = default;
  export_context(const export_context&) = delete;
  export_context& operator=(const export_context&) = delete;
  virtual ~export_context() = default;
};

/// An export that owns its memory: destroying the context destroys the container.
template <class Container>
struct owning_export_context final : export_context {
  explicit owning_export_context(Container&& c) : container(std::move(c)) {}
  Container container;
};

/// The deleter of every exported tensor (no C linkage: the name stays in gpubatch's namespace, and
/// compilers call C++ functions through DLPack's pointer type alike).
inline void delete_export(DLManagedTensor* self) {
  // A consumer calls this once; null is tolerated as free(nullptr) is.
  if (self != nullptr) {
    delete static_cast<export_context*>(self->manager_ctx);
  }
}

template <class C>
struct is_exportable_container : std::false_type {};
template <class T>
struct is_exportable_container<device_buffer<T>> : std::true_type {};
template <class T>
struct is_exportable_container<pinned_buffer<T>> : std::true_type {};

/// The device holding `data` (the current device for null), as DLPack names it.
inline int cuda_device_of(const void* data) {
  if (data != nullptr) {
    cudaPointerAttributes attributes{};
    GPUBATCH_CUDA_TRY(cudaPointerGetAttributes(&attributes, data));
    return attributes.device;
  }
  int device = 0;
  GPUBATCH_CUDA_TRY(cudaGetDevice(&device));
  return device;
}

inline DLDevice device_of(memory_space space, const void* data) {
  if (space == memory_space::unknown) {
    space = memory_space_of(data);
  }
  switch (space) {
    case memory_space::pinned: return DLDevice{kDLCUDAHost, 0};
    case memory_space::device: return DLDevice{kDLCUDA, cuda_device_of(data)};
    case memory_space::managed: return DLDevice{kDLCUDAManaged, 0};
    default: return DLDevice{kDLCPU, 0};
  }
}

/// Fills the context's tensor; shape and strides are already in place.
template <class T>
DLManagedTensor* finish(std::unique_ptr<export_context> context, T* data, DLDevice device) {
  DLManagedTensor& managed = context->managed;
  managed.dl_tensor.data = const_cast<std::remove_const_t<T>*>(data);
  managed.dl_tensor.device = device;
  managed.dl_tensor.ndim = static_cast<int>(context->shape.size());
  managed.dl_tensor.dtype = dtype_of<std::remove_const_t<T>>();
  managed.dl_tensor.shape = context->shape.data();
  managed.dl_tensor.strides = context->strides.data();
  managed.dl_tensor.byte_offset = 0;
  managed.manager_ctx = context.get();
  managed.deleter = &delete_export;
  context.release();
  return &managed;
}

/// The strides of C order for `shape`, or `strides` after checking them; throws naming
/// `shape`, `strides` or `container` if the tensor would reach past `size` elements.
template <class T>
std::vector<std::int64_t> checked_export_strides(const std::vector<std::int64_t>& shape,
                                                 std::vector<std::int64_t> strides,
                                                 std::size_t size) {
  const int ndim = static_cast<int>(shape.size());
  if (shape.size() > 64) {
    throw invalid_argument("shape", std::to_string(shape.size()) + " dimensions (at most 64)");
  }
  for (int i = 0; i < ndim; ++i) {
    if (shape[i] < 0) {
      throw invalid_argument("shape", "extent " + std::to_string(shape[i]) + " of dimension " +
                                          std::to_string(i) + " in " +
                                          tuple_string(shape.data(), ndim) + " is negative");
    }
  }
  if (strides.empty()) {
    strides.resize(shape.size());
    std::int64_t compact = 1;
    for (int i = ndim - 1; i >= 0; --i) {
      strides[i] = compact;
      if (!multiply_add(compact, shape[i] > 0 ? shape[i] : 1, 0, compact)) {
        throw invalid_argument("shape", tuple_string(shape.data(), ndim) +
                                            " has more elements than an int64 counts");
      }
    }
  } else if (strides.size() != shape.size()) {
    throw invalid_argument("strides", std::to_string(strides.size()) + " strides for " +
                                          std::to_string(shape.size()) + " dimensions");
  }
  for (int i = 0; i < ndim; ++i) {
    if (strides[i] < 0) {
      throw invalid_argument("strides", "stride " + std::to_string(strides[i]) + " in " +
                                            tuple_string(strides.data(), ndim) + " is negative");
    }
  }
  const std::int64_t span =
      span_elements(shape.data(), strides.data(), ndim, max_elements(sizeof(T)));
  if (span < 0 || static_cast<std::uint64_t>(span) > size) {
    throw invalid_argument("container", "holds " + std::to_string(size) +
                                            " elements, but a tensor of shape " +
                                            tuple_string(shape.data(), ndim) + " and strides " +
                                            tuple_string(strides.data(), ndim) + " reaches " +
                                            (span < 0 ? std::string("past int64")
                                                      : std::to_string(span)));
  }
  return strides;
}

template <class View>
struct view_exporter {
  static_assert(dependent_false_v<View>,
                "gpubatch::to_dlpack(view): the view must be a gpubatch::span, "
                "matrix_batch_view or tensor4d_view");
};

template <class T>
struct view_exporter<span<T>> {
  static DLManagedTensor* make(const span<T>& s) {
    auto context = std::make_unique<export_context>();
    context->shape = {static_cast<std::int64_t>(s.size())};
    context->strides = {1};
    const DLDevice device = device_of(s.space(), s.data());
    return finish(std::move(context), s.data(), device);
  }
};

template <class T>
struct view_exporter<matrix_batch_view<T>> {
  static DLManagedTensor* make(const matrix_batch_view<T>& v) {
    auto context = std::make_unique<export_context>();
    context->shape = {v.count(), v.rows(), v.cols()};
    context->strides = {v.batch_stride(), v.mapping().stride(0), v.mapping().stride(1)};
    const DLDevice device = device_of(v.space(), v.data());
    return finish(std::move(context), v.data(), device);
  }
};

template <class T>
struct view_exporter<tensor4d_view<T>> {
  static DLManagedTensor* make(const tensor4d_view<T>& v) {
    auto context = std::make_unique<export_context>();
    context->shape = {v.n(), v.c(), v.h(), v.w()};
    const auto& m = v.mapping();
    context->strides = {m.stride(0), m.stride(1), m.stride(2), m.stride(3)};
    const DLDevice device = device_of(v.space(), v.data());
    return finish(std::move(context), v.data(), device);
  }
};

}  // namespace detail::dlpack

template <class Container>
DLManagedTensor* to_dlpack(Container&& container, std::vector<std::int64_t> shape,
                           std::vector<std::int64_t> strides) {
  using C = std::remove_cv_t<std::remove_reference_t<Container>>;
  static_assert(detail::dlpack::is_exportable_container<C>::value,
                "gpubatch::to_dlpack(container, shape): the container must be a "
                "gpubatch::device_buffer or pinned_buffer");
  static_assert(!std::is_lvalue_reference_v<Container> && !std::is_const_v<C>,
                "gpubatch::to_dlpack(container, shape): the tensor takes ownership of the "
                "container; pass std::move(container)");
  using T = typename C::value_type;
  strides = detail::dlpack::checked_export_strides<T>(shape, std::move(strides), container.size());
  const DLDevice device = detail::dlpack::device_of(container.space(), container.data());

  // Everything that can throw is done before the container moves into the context.
  auto context =
      std::make_unique<detail::dlpack::owning_export_context<C>>(std::move(container));
  context->shape = std::move(shape);
  context->strides = std::move(strides);
  T* const data = context->container.data();
  return detail::dlpack::finish(std::move(context), data, device);
}

template <class View>
DLManagedTensor* to_dlpack(const View& view) {
  return detail::dlpack::view_exporter<View>::make(view);
}

GPUBATCH_NAMESPACE_END
