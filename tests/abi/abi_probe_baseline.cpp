// Built for the baseline instruction set, without OpenMP.
#define ABI_PROBE_NAME abi_probe_baseline
#include "abi_probe.inc"
