// Containers hold trivially copyable elements only: their bytes move between host and device.
#include <gpubatch/containers.hpp>

#include <string>

int main() { gpubatch::device_buffer<std::string> buffer(4, gpubatch::on_host); }
