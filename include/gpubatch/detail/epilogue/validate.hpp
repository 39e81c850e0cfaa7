/// @file detail/epilogue/validate.hpp
/// @brief Checks of the epilogues gpubatch defines, before anything runs: a null or unreachable
/// bias or residual is an invalid_argument on either backend, not a fault in a kernel.
/// A user-defined epilogue is the user's to check.
#pragma once

#include <gpubatch/detail/gemm/validate.hpp>
#include <gpubatch/epilogue.hpp>
#include <gpubatch/error.hpp>

#include <string>

GPUBATCH_NAMESPACE_BEGIN
namespace detail {

template <class Exec, class E>
void check_epilogue(const Exec&, const E&, const std::string&) {}

template <class Exec, class B>
void check_bias(const Exec& exec, const B* bias, const std::string& name, const char* kind) {
  if (bias == nullptr) {
    throw invalid_argument(name, std::string(kind) + "'s bias pointer is null");
  }
  require_accessible(exec, (name + ".bias").c_str(), memory_space::unknown, bias);
}

template <class Exec, class B>
void check_epilogue(const Exec& exec, const epilogue::bias_row<B>& e, const std::string& name) {
  check_bias(exec, e.bias, name, "bias_row");
}

template <class Exec, class B>
void check_epilogue(const Exec& exec, const epilogue::bias_col<B>& e, const std::string& name) {
  check_bias(exec, e.bias, name, "bias_col");
}

template <class Exec, class R>
void check_epilogue(const Exec& exec, const epilogue::residual_add<R>& e, const std::string& name) {
  if (e.residual.data() == nullptr) {
    throw invalid_argument(name, "residual_add's residual view has no data");
  }
  require_accessible(exec, (name + ".residual").c_str(), e.residual.space(), e.residual.data());
}

template <class Exec, class R>
void check_epilogue(const Exec& exec, const epilogue::relu_backward<R>& e, const std::string& name) {
  if (e.forward.data() == nullptr) {
    throw invalid_argument(name, "relu_backward's forward view has no data");
  }
  require_accessible(exec, (name + ".forward").c_str(), e.forward.space(), e.forward.data());
}

template <class Exec, class R>
void check_epilogue(const Exec& exec, const epilogue::gelu_tanh_backward<R>& e,
                    const std::string& name) {
  if (e.preactivation.data() == nullptr) {
    throw invalid_argument(name, "gelu_tanh_backward's preactivation view has no data");
  }
  require_accessible(exec, (name + ".preactivation").c_str(), e.preactivation.space(),
                     e.preactivation.data());
}

template <class Exec, class First, class Second>
void check_epilogue(const Exec& exec, const epilogue::chain<First, Second>& e,
                    const std::string& name) {
  check_epilogue(exec, e.first, name + ".first");
  check_epilogue(exec, e.second, name + ".second");
}

/// A pointer-array batch: every entry must point somewhere. Read only where the host can read
/// the array (the host backend, and pinned or managed arrays on the CUDA backend); an array in
/// device memory is not read back, which would cost a copy and a synchronisation per call.
template <class Exec, class T>
void check_pointer_entries(const Exec& exec, const char* name,
                           const pointer_matrix_batch_view<T>& view) {
  const memory_space space =
      view.space() == memory_space::unknown ? memory_space_of(view.pointers()) : view.space();
  const bool host_readable = is_host_exec_v<Exec> || space == memory_space::pinned ||
                             space == memory_space::managed;
  if (!host_readable) {
    return;
  }
  for (index_t i = 0; i < view.count(); ++i) {
    const T* p = view.pointers()[i];
    if (p == nullptr) {
      throw invalid_argument(name, "entry " + std::to_string(i) + " of the pointer array is null");
    }
    if (applies_cuda_rules(exec)) {
      const std::string entry = std::string(name) + "[" + std::to_string(i) + "]";
      require_cuda_rules(exec, entry.c_str(), memory_space_of(p), p);
    }
  }
}

}  // namespace detail
GPUBATCH_NAMESPACE_END
