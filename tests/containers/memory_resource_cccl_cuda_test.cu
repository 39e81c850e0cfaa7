// The memory resource tests again in a program that enables CCCL's resource concepts: gpubatch
// accepts cuda::mr::async_resource_ref like any resource, and reads the memory-space properties
// a resource declares.
#define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE

#include <cuda/memory_resource>

#include "../support/cuda_backend.hpp"

#include "memory_resource.inc"

namespace {

/// A counting resource that declares its memory space through CCCL's properties.
template <class... Properties>
struct declaring_resource {
  counting_resource* upstream;

  void* allocate(std::size_t bytes, std::size_t alignment) {
    return upstream->allocate(bytes, alignment);
  }
  void deallocate(void* p, std::size_t bytes, std::size_t alignment) noexcept {
    upstream->deallocate(p, bytes, alignment);
  }
  void* allocate_async(std::size_t bytes, std::size_t alignment, cuda::stream_ref stream) {
    return upstream->allocate_async(bytes, alignment, stream);
  }
  void deallocate_async(void* p, std::size_t bytes, std::size_t alignment,
                        cuda::stream_ref stream) {
    upstream->deallocate_async(p, bytes, alignment, stream);
  }
  bool operator==(const declaring_resource& other) const { return upstream == other.upstream; }
  bool operator!=(const declaring_resource& other) const { return upstream != other.upstream; }
  template <class Property,
            std::enable_if_t<(std::is_same_v<Property, Properties> || ...), int> = 0>
  friend void get_property(const declaring_resource&, Property) noexcept {}
};

using device_resource = declaring_resource<cuda::mr::device_accessible>;
using host_resource = declaring_resource<cuda::mr::host_accessible>;

}  // namespace

TEST_CASE("a cuda::mr::async_resource_ref serves device_buffer and pipeline", "[memory_resource]") {
  STATIC_REQUIRE(cuda::mr::async_resource_with<device_resource, cuda::mr::device_accessible>);
  counting_resource r(upstream::device);
  device_resource declaring{&r};
  cuda::mr::async_resource_ref<cuda::mr::device_accessible> ref{declaring};
  STATIC_REQUIRE(gpubatch::is_async_memory_resource_v<decltype(ref)>);
  STATIC_REQUIRE(gpubatch::is_memory_resource_v<decltype(ref)>);
  {
    const auto values = gpubatch::test::random_values<float>(513, 21);
    gpubatch::device_buffer<float> a(values.size(), test_backend::exec(), ref);
    CHECK(a.resource().get() == &ref);
    CHECK(r.owns(a.data(), a.size_bytes()));
    CHECK(r.async_calls() == 1);
    CHECK(r.last_stream() == test_backend::exec().stream());
    test_backend::from_host(a.data(), values);
    a.resize(1100, test_backend::exec());
    CHECK(test_backend::to_host(a.data(), values.size()) == values);

    counting_resource pinned(upstream::pinned);
    gpubatch::pipeline_options options;
    options.chunk_items = 4;
    options.staging = gpubatch::staging_mode::always;
    options.device_resource = ref;
    options.pinned_resource = pinned;
    const auto input = gpubatch::test::random_values<float>(30, 22);
    std::vector<float> output(30, -1.0F);
    gpubatch::pipeline<float, float, gpubatch::cuda_exec> p(test_backend::exec(),
                                                           gpubatch::item_shape{3, 3}, options);
    (void)p.run(input, output, [](gpubatch::cuda_exec exec,
                                  const gpubatch::pipeline_chunk<float, float>& chunk) {
      gpubatch::copy_async(exec, chunk.output, chunk.input);
    });
    CHECK(output == input);
    CHECK(r.allocations() == 3);  // a, a resized, the pipeline's ring
    p.release();
    pinned.require_balanced();
  }
  test_backend::synchronize();
  r.require_balanced();
}

TEST_CASE("a resource that declares the wrong memory space is refused", "[memory_resource]") {
  counting_resource r(upstream::pinned);
  host_resource host_only{&r};
  device_resource device_only{&r};
  try {
    gpubatch::device_buffer<float> a(8, test_backend::exec(), host_only);
    FAIL("no exception");
  } catch (const gpubatch::invalid_argument& e) {
    CHECK(e.parameter() == "resource");
  }
  try {
    gpubatch::pinned_buffer<float> a(8, test_backend::exec(), device_only);
    FAIL("no exception");
  } catch (const gpubatch::invalid_argument& e) {
    CHECK(e.parameter() == "resource");
  }
  gpubatch::pipeline_options options;
  options.device_resource = host_only;
  try {
    gpubatch::pipeline<float, float, gpubatch::cuda_exec> p(test_backend::exec(),
                                                           gpubatch::item_shape{1, 1}, options);
    FAIL("no exception");
  } catch (const gpubatch::invalid_argument& e) {
    CHECK(e.parameter() == "options.device_resource");
  }
  options.device_resource = {};
  options.pinned_resource = device_only;
  try {
    gpubatch::pipeline<float, float, gpubatch::cuda_exec> p(test_backend::exec(),
                                                           gpubatch::item_shape{1, 1}, options);
    FAIL("no exception");
  } catch (const gpubatch::invalid_argument& e) {
    CHECK(e.parameter() == "options.pinned_resource");
  }
  gpubatch::pinned_pool_options pool_options;
  pool_options.resource = device_only;
  CHECK_THROWS_AS(gpubatch::pinned_pool<gpubatch::cuda_exec>(test_backend::exec(), pool_options),
                  gpubatch::invalid_argument);
  // Declaring what is needed passes; declaring nothing says nothing.
  gpubatch::pinned_buffer<float> accepted(8, test_backend::exec(), host_only);
  CHECK(r.owns(accepted.data(), accepted.size_bytes()));
  CHECK(r.allocations() == 1);
  // A synchronous cuda::mr::resource_ref carries its properties too.
  cuda::mr::resource_ref<cuda::mr::host_accessible> host_ref{host_only};
  CHECK_FALSE(gpubatch::memory_resource_ref(host_ref).stream_ordered());
  gpubatch::pinned_buffer<float> through_ref(8, test_backend::exec(), host_ref);
  CHECK(r.owns(through_ref.data(), through_ref.size_bytes()));
  CHECK(r.allocations() == 2);
  CHECK_THROWS_AS(gpubatch::device_buffer<float>(8, test_backend::exec(), host_ref),
                  gpubatch::invalid_argument);
}
