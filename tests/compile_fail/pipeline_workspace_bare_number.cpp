// A workspace size without its unit does not compile: bytes and elements cannot be confused.
#include <gpubatch/pipeline.hpp>

int main() {
  const gpubatch::item_shape shape{16, 4, 256};  // error: 256 of what?
  (void)shape;
}
