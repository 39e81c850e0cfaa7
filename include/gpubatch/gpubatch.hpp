/// @file gpubatch.hpp
/// @brief Umbrella header: includes every public gpubatch header.
#pragma once

#include <gpubatch/config.hpp>
#include <gpubatch/containers.hpp>
#include <gpubatch/conv.hpp>
#include <gpubatch/conv_backward.hpp>
#include <gpubatch/conv_filters.hpp>
#include <gpubatch/conv_policy.hpp>
#include <gpubatch/conv_problem.hpp>
#include <gpubatch/epilogue.hpp>
#include <gpubatch/error.hpp>
#include <gpubatch/execution.hpp>
#include <gpubatch/fill.hpp>
#include <gpubatch/gemm.hpp>
#include <gpubatch/gemm_policy.hpp>
#include <gpubatch/gemm_problem.hpp>
#include <gpubatch/launch.hpp>
#include <gpubatch/memory_resource.hpp>
#include <gpubatch/memory_space.hpp>
#include <gpubatch/multi_device.hpp>
#include <gpubatch/numeric.hpp>
#include <gpubatch/pinned_pool.hpp>
#include <gpubatch/pipeline.hpp>
#include <gpubatch/stream.hpp>
#include <gpubatch/transfer.hpp>
#include <gpubatch/version.hpp>
#include <gpubatch/views.hpp>
