// Built with -O3 -march=native and OpenMP, as the README suggests for host code.
#define ABI_PROBE_NAME abi_probe_native
#include "abi_probe.inc"
