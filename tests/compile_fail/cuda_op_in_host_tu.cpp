// A CUDA-backend operation called from a file the host compiler builds must fail to compile
// with a readable message, not link-fail later.
#include <gpubatch/containers.hpp>
#include <gpubatch/fill.hpp>

int main() {
  gpubatch::device_buffer<float> buffer(4, gpubatch::on(nullptr));
  gpubatch::fill(gpubatch::on(nullptr), buffer, 1.0F);
}
