// A tensor-core policy whose warps cannot form the near-square warp grid fails at compile time,
// saying why.
#include <gpubatch/gemm_policy.hpp>

int main() { return gpubatch::tensor_core_policy<64, 64, 32, 3, 2>::threads; }
