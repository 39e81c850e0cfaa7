// default_small_tile_policy has tiles of 16 and 32 only: another size names what is allowed.
#include <gpubatch/gemm_policy.hpp>

using policy = gpubatch::default_small_tile_policy<float, 90, 24>::type;

int main() { return policy::tile_m; }
