// Prints what the default policies state for each kernel they dispatch to: threads, blocks per
// SM (and so the register budget) and the dynamic shared memory a launch asks for, computed by
// the dispatch's own functions. scripts/kernel-audit joins it with the compiled kernels'
// resource usage. A host program: it launches nothing and needs no GPU.
#include <gpubatch/gpubatch.hpp>

#include <cstdint>
#include <cstdio>
#include <type_traits>

namespace {

namespace gb = gpubatch;
namespace gd = gpubatch::detail;

template <class T>
const char* name_of() {
  if constexpr (std::is_same_v<T, float>) return "f32";
  else if constexpr (std::is_same_v<T, double>) return "f64";
  else if constexpr (std::is_same_v<T, gb::half>) return "f16";
  else if constexpr (std::is_same_v<T, gb::bfloat16>) return "bf16";
  else if constexpr (std::is_same_v<T, std::int8_t>) return "i8";
  else return "i32";
}

// One row: the kernel family, the policy, the type its shared memory is sized by (the compute
// type on SIMT kernels, the operand type on tensor cores) and the bytes a launch asks for.
// Tensor-core GEMM kernels also name how they stage A and B ("k" K-major, "mn" M/N-major), the
// pipeline stages and the blocks per SM that staging is built for.
template <class Policy, class Type>
void row(const char* family, std::int64_t shared_bytes, const char* staging = "-",
         int stages = Policy::stages, int min_blocks = Policy::min_blocks_per_sm) {
  std::printf("family=%s policy=%d,%d,%d,%d,%d,%d,%d type=%s staging=%s threads=%d "
              "min_blocks=%d stages=%d shared=%lld\n",
              family, Policy::tile_m, Policy::tile_n, Policy::tile_k, Policy::warps,
              Policy::stages, Policy::problems_per_block, Policy::min_blocks_per_sm,
              name_of<Type>(), staging, Policy::threads, min_blocks, stages,
              static_cast<long long>(shared_bytes));
}

template <gd::tensor_core::staging S>
const char* staging_name() {
  return S == gd::tensor_core::staging::k_major ? "k" : "mn";
}

template <class P, class T, class Batch, gd::tensor_core::staging A, gd::tensor_core::staging B>
void tensor_core_row(const char* family) {
  using compute = gb::compute_type_t<T>;
  char staging[8];
  std::snprintf(staging, sizeof staging, "%s,%s", staging_name<A>(), staging_name<B>());
  using G = gd::tensor_core::geometry<P, T, A, B>;
  row<P, T>(family, gd::cuda_gemm::tiled_shared_bytes<P, Batch, compute, A, B>(), staging,
            G::stages, G::min_blocks_per_sm);
}

template <class P, class T, class Batch>
void tensor_core_rows(const char* family) {
  using gd::tensor_core::staging;
  tensor_core_row<P, T, Batch, staging::k_major, staging::k_major>(family);
  tensor_core_row<P, T, Batch, staging::k_major, staging::mn_major>(family);
  tensor_core_row<P, T, Batch, staging::mn_major, staging::k_major>(family);
  tensor_core_row<P, T, Batch, staging::mn_major, staging::mn_major>(family);
}

template <int Arch, class T, gb::size_class Size>
void gemm_rows() {
  using compute = gb::compute_type_t<T>;
  using uniform = gd::strided_gemm_batch<T, T, compute>;
  using grouped = gd::grouped_gemm_batch<T, T, compute>;
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    using P = typename gb::default_gemm_policy<T, Arch, Size>::type;
    row<P, compute>("tiled_gemm_kernel",
                    gd::cuda_gemm::tiled_shared_bytes<P, uniform, compute>());
    row<P, compute>("grouped_tiled_gemm_kernel",
                    gd::cuda_gemm::tiled_shared_bytes<P, grouped, compute>());
  }
  if constexpr (gd::tensor_core::supported_v<T>) {
    using P = typename gb::default_tensor_core_policy<T, Arch, Size>::type;
    tensor_core_rows<P, T, uniform>("tensor_core_gemm_kernel");
    tensor_core_rows<P, T, grouped>("grouped_tensor_core_gemm_kernel");
  }
}

// The small tiles of uniform batches of tiny problems (default_small_tile_policy).
template <int Arch, class T, int Tile>
void small_tile_rows() {
  using compute = gb::compute_type_t<T>;
  using uniform = gd::strided_gemm_batch<T, T, compute>;
  // SIMT where the dispatch takes it: f32 and f64 (f16 and bf16 take tensor cores).
  if constexpr (!gd::tensor_core::supported_v<T> || std::is_same_v<T, float>) {
    using P = typename gb::default_small_tile_policy<T, Arch, Tile>::type;
    row<P, compute>("tiled_gemm_kernel", gd::cuda_gemm::tiled_shared_bytes<P, uniform, compute>());
  }
  if constexpr (gd::tensor_core::supported_v<T>) {
    using P = typename gb::default_small_tensor_core_policy<T, Arch, Tile>::type;
    tensor_core_rows<P, T, uniform>("tensor_core_gemm_kernel");
  }
}

template <class P, class T>
void conv_row() {
  using compute = gb::compute_type_t<T>;
  using batch = gd::conv::fprop_batch<T, T, compute>;
  if constexpr (P::tensor_cores) {
    using gd::tensor_core::staging;
    using nhwc = gd::tensor_core::geometry<P, T, staging::k_major, staging::k_major>;
    using nchw = gd::tensor_core::geometry<P, T, staging::mn_major, staging::k_major>;
    row<P, T>("tensor_core_conv_kernel", gd::cuda_conv::implicit_shared_bytes<P, batch, compute>(),
              "k", nhwc::stages, nhwc::min_blocks_per_sm);
    row<P, T>("tensor_core_conv_kernel",
              gd::cuda_conv::implicit_shared_bytes<P, batch, compute, staging::mn_major>(), "mn",
              nchw::stages, nchw::min_blocks_per_sm);
  } else {
    row<P, compute>("implicit_gemm_kernel",
                    gd::cuda_conv::implicit_shared_bytes<P, batch, compute>());
  }
}

template <int Arch, class T, gb::size_class Size>
void conv_rows() {
  conv_row<typename gb::default_conv2d_policy<T, Arch, Size>::type, T>();
  if constexpr (std::is_same_v<T, float>) {  // TF32
    conv_row<typename gb::default_conv2d_policy<T, Arch, Size, true>::type, T>();
  }
  // The backward passes: the SIMT policy of the accumulate type.
  if constexpr (!std::is_same_v<T, std::int8_t>) {
    using compute = gb::compute_type_t<T>;
    conv_row<typename gb::default_conv2d_policy<compute, Arch, Size, false>::type, compute>();
  }
}

template <int Arch, class T>
void rows_of() {
  using tiny = typename gb::default_gemm_policy<T, Arch, gb::size_class::tiny>::type;
  // The tiny kernel sizes its shared memory per launch, within the cap that leaves room for its
  // blocks per SM (an SM's 164 KiB on sm_80, 228 KiB on sm_90, 1 KiB reserved per block).
  const gb::index_t sm_shared = Arch == 80 ? 164 * 1024 : 228 * 1024;
  row<tiny, gb::compute_type_t<T>>(
      "tiny_gemm_kernel", gd::tiny::shared_cap(sm_shared, 1024, tiny::min_blocks_per_sm));
  if constexpr (gd::small_tile_default_v<T>) {
    small_tile_rows<Arch, T, 16>();
    small_tile_rows<Arch, T, 32>();
  }
  gemm_rows<Arch, T, gb::size_class::medium>();
  gemm_rows<Arch, T, gb::size_class::large>();
  conv_rows<Arch, T, gb::size_class::medium>();
  conv_rows<Arch, T, gb::size_class::large>();
}

template <int Arch>
void arch_rows() {
  std::printf("arch=%d\n", Arch);
  rows_of<Arch, float>();
  rows_of<Arch, double>();
  rows_of<Arch, gb::half>();
  rows_of<Arch, gb::bfloat16>();
  rows_of<Arch, std::int8_t>();
}

}  // namespace

int main() {
  arch_rows<80>();
  arch_rows<90>();
  return 0;
}
