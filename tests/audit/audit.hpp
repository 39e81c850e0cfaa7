// What the kernel audit compiles: every kernel the default policies dispatch to, instantiated
// through the public API. The functions are compiled, never called: the audit reads the
// resource usage and SASS of the objects (scripts/kernel-audit).
#pragma once

#include <gpubatch/gpubatch.hpp>

#include <cstdint>

namespace gpubatch_audit {

using gpubatch::index_t;

// The dispatch reaches every size class and the tensor-core and SIMT paths at run time, so one
// call per batch form instantiates all of a form's default kernels.
template <class TA, class TC>
void gemm_all_forms(cudaStream_t stream) {
  const auto exec = gpubatch::on(stream);
  gpubatch::gemm_options options;
  options.allow_tf32 = true;  // f32: the TF32 kernels as well as the SIMT ones
  const TA* a = nullptr;
  TC* c = nullptr;
  const gpubatch::matrix_batch_view<const TA> av(a, 64, 64, 64, 4096, 2);
  const gpubatch::matrix_batch_view<TC> cv(c, 64, 64, 64, 4096, 2);
  gpubatch::gemm(exec, gpubatch::op::none, gpubatch::op::none, 1, av, av, 0, cv, {}, options);
  const TA* const* ap = nullptr;
  TC* const* cp = nullptr;
  const gpubatch::pointer_matrix_batch_view<const TA> apv(ap, 64, 64, 64, 2);
  const gpubatch::pointer_matrix_batch_view<TC> cpv(cp, 64, 64, 64, 2);
  gpubatch::gemm(exec, gpubatch::op::none, gpubatch::op::none, 1, apv, apv, 0, cpv, {}, options);
  const gpubatch::gemm_problem<TA, TA, TC>* problems = nullptr;
  gpubatch::gemm_grouped(exec, gpubatch::grouped_gemm_layout{}, 1, problems, 2, 0, {},
                         gpubatch::grouped_gemm_bounds{64, 64, 64}, options);
}

// Uniform (shared and per-sample filters, split-K, depthwise by the run-time group test) and
// grouped convolutions.
template <class TX, class TY>
void conv_all_forms(cudaStream_t stream) {
  const auto exec = gpubatch::on(stream);
  gpubatch::conv2d_options options;
  options.allow_tf32 = true;
  const TX* x = nullptr;
  TY* y = nullptr;
  const gpubatch::tensor4d_view<const TX> xv(x, 1, 8, 8, 8, gpubatch::tensor_layout::nhwc);
  const gpubatch::tensor4d_view<const TX> wv(x, 8, 8, 3, 3, gpubatch::tensor_layout::nhwc);
  const gpubatch::tensor4d_view<TY> yv(y, 1, 8, 6, 6, gpubatch::tensor_layout::nhwc);
  gpubatch::conv2d(exec, {}, 1, xv, wv, 0, yv, {}, options);
  gpubatch::conv2d_per_sample(exec, {}, 1, xv, wv, 0, yv, {}, options);
  const gpubatch::conv2d_problem<TX, TX, TY>* problems = nullptr;
  gpubatch::conv2d_grouped(exec, gpubatch::tensor_layout::nhwc, 1, problems, 2, 0, {},
                           gpubatch::grouped_conv2d_bounds{36, 8, 1}, options);
}

// Backward data, filter and bias, and the per-sample filter-gradient norms.
template <class T>
void conv_backward_all(cudaStream_t stream) {
  const auto exec = gpubatch::on(stream);
  using compute = gpubatch::detail::conv::scalar_t<T>;
  const T* in = nullptr;
  T* out = nullptr;
  const gpubatch::tensor4d_view<const T> dy(in, 1, 8, 6, 6, gpubatch::tensor_layout::nhwc);
  const gpubatch::tensor4d_view<const T> w(in, 8, 8, 3, 3, gpubatch::tensor_layout::nhwc);
  const gpubatch::tensor4d_view<const T> x(in, 1, 8, 8, 8, gpubatch::tensor_layout::nhwc);
  const gpubatch::tensor4d_view<T> dx(out, 1, 8, 8, 8, gpubatch::tensor_layout::nhwc);
  const gpubatch::tensor4d_view<T> dw(out, 8, 8, 3, 3, gpubatch::tensor_layout::nhwc);
  gpubatch::conv2d_backward_data(exec, {}, 1, dy, w, 0, dx);
  // Packed for backward data: the filters turned once, then the forward kernels.
  const gpubatch::packed_conv2d_filters<T> packed(exec, {}, w, gpubatch::filter_passes::backward_data);
  gpubatch::conv2d_backward_data(exec, {}, 1, dy, packed, 0, dx);
  gpubatch::conv2d_backward_filter(exec, {}, 1, x, dy, 0, dw);
  gpubatch::conv2d_backward_bias(exec, 1, dy, 0, out);
  compute* norms = nullptr;
  gpubatch::conv2d_backward_filter_per_sample_norms(exec, {}, x, gpubatch::tensor4d_shape{8, 8, 3, 3},
                                                    dy, norms, {});
}

template <class T>
void fill_one(cudaStream_t stream) {
  T* p = nullptr;
  gpubatch::fill(gpubatch::on(stream), p, 1, T{});
}

}  // namespace gpubatch_audit
