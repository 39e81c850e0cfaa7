// gpubatch quickstart: one program for a machine with or without a GPU.
//
// It generates a synthetic batch of images in pinned host memory, moves it to the best available
// backend's memory, views it as a matrix batch, poisons an output buffer with gpubatch::fill,
// copies the batch back and checks it, and prints what it moved and how fast.
//
//   quickstart [--batch N] [--size S]     (N images of S x S floats; defaults 512 and 128)
#include <gpubatch/gpubatch.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

namespace {

struct options {
  long long batch = 512;
  long long size = 128;
};

options parse(int argc, char** argv) {
  options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--batch" && has_value) {
      opt.batch = std::atoll(argv[++i]);
    } else if (arg == "--size" && has_value) {
      opt.size = std::atoll(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--batch N] [--size S]\n", argv[0]);
      std::exit(arg == "--help" ? 0 : 2);
    }
  }
  if (opt.batch < 1) throw gpubatch::invalid_argument("--batch", std::to_string(opt.batch) + " is less than 1");
  if (opt.size < 1) throw gpubatch::invalid_argument("--size", std::to_string(opt.size) + " is less than 1");
  return opt;
}

/// Copies `bytes` between buffers of the backend `exec` selects, ordered on its stream.
template <class Exec>
void copy_bytes(Exec exec, void* dst, const void* src, std::size_t bytes) {
  if constexpr (gpubatch::is_cuda_exec_v<Exec>) {
    GPUBATCH_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, exec.stream()));
  } else {
    std::memcpy(dst, src, bytes);
  }
}

template <class Exec>
void synchronize(Exec exec) {
  if constexpr (gpubatch::is_cuda_exec_v<Exec>) {
    GPUBATCH_CUDA_TRY(cudaStreamSynchronize(exec.stream()));
  }
}

template <class Exec>
int run(Exec exec, const options& opt) {
  if constexpr (gpubatch::is_host_exec_v<Exec>) {
    // The CUDA backend's memory rules on the host as well: what runs here runs on a GPU.
    exec.cuda_memory_rules = true;
  }
  const auto count = static_cast<std::size_t>(opt.batch * opt.size * opt.size);
  const std::size_t bytes = count * sizeof(float);
  std::printf("backend: %s, batch: %lld images of %lld x %lld floats (%.1f MiB)\n",
              gpubatch::is_cuda_exec_v<Exec> ? "cuda" : "host", opt.batch, opt.size, opt.size,
              static_cast<double>(bytes) / (1 << 20));

  // Synthetic input, generated in-process.
  gpubatch::pinned_buffer<float> images(count, exec);
  std::mt19937 engine(2026);
  std::uniform_real_distribution<float> pixel(0.0F, 1.0F);
  for (float& v : images) v = pixel(engine);

  gpubatch::device_buffer<float> on_backend(count, exec);
  gpubatch::pinned_buffer<float> returned(count, exec);
  gpubatch::fill(exec, on_backend, -1.0F);  // poison: a missed copy would show

  const auto start = std::chrono::steady_clock::now();
  copy_bytes(exec, on_backend.data(), images.data(), bytes);
  copy_bytes(exec, returned.data(), on_backend.data(), bytes);
  synchronize(exec);
  const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;

  // The same bytes came back, and a view finds image b's pixel (i, j) where it should be.
  const auto view = gpubatch::matrix_batch_view<const float>::packed(returned, opt.size, opt.size, opt.batch);
  const long long b = opt.batch - 1, i = opt.size / 2, j = opt.size - 1;
  const bool same = std::memcmp(images.data(), returned.data(), bytes) == 0 &&
                    view(b, i, j) == images[static_cast<std::size_t>((b * opt.size + i) * opt.size + j)];
  std::printf("round trip: %s, %.2f GB/s (2 x %.1f MiB in %.3f ms)\n", same ? "ok" : "MISMATCH",
              2.0 * static_cast<double>(bytes) / seconds.count() / 1e9,
              static_cast<double>(bytes) / (1 << 20), seconds.count() * 1e3);
  return same ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const options opt = parse(argc, argv);
    // One code path for both machines: the GPU when this file's kernels run on it, else the CPU.
    std::printf("%s\n", gpubatch::to_string(gpubatch::best_available_choice()).c_str());
    return gpubatch::with_best_available([&](auto exec) { return run(exec, opt); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "quickstart: %s\n", e.what());
    return 1;
  }
}
