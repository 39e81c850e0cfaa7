// Compiled by nvcc: the host code of a CUDA file, with its own architecture list.
#define ABI_PROBE_NAME abi_probe_nvcc
#include "abi_probe.inc"
