// A policy whose tile does not divide among its threads fails at compile time, saying why.
#include <gpubatch/gemm_policy.hpp>

int main() { return gpubatch::gemm_policy<16, 16, 16, 16, 2>::threads; }
