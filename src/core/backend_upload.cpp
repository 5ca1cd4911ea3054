// The Backend's defaults for pinned host memory and upload lanes (backend.hpp): ordinary
// memory, and a lane that uploads with copy_from_host in operation order, whose marks,
// joins and fences have nothing to do: right for every backend whose copy_from_host has
// copied when it returns.
#include <cstdlib>

#include "lamina/backend.hpp"
#include "lamina/common.hpp"
#include "lamina/host_memory.hpp"

namespace lamina {
namespace {

class PassedFence final : public UploadFence {
 public:
  void record() override {}
  void wait() override {}
};

class InOrderLane final : public UploadLane {
 public:
  explicit InOrderLane(Backend& backend) : backend_(backend) {}
  void mark(int /*m*/) override {}
  void wait_for(int /*m*/) override {}
  void upload(size_t bytes, const void* pinned_src, void* dst) override {
    backend_.copy_from_host(bytes, pinned_src, dst);
  }
  void join() override {}
  std::unique_ptr<UploadFence> make_fence() override { return std::make_unique<PassedFence>(); }

 private:
  Backend& backend_;
};

}  // namespace

void* Backend::allocate_pinned(size_t bytes) {
  if (bytes == 0) return nullptr;
  require_host_memory(bytes, "host buffers for uploads");
  void* p = std::malloc(bytes);
  LAMINA_REQUIRE(p != nullptr, "could not allocate ", readable_bytes(bytes),
                 " of host memory for uploads");
  return p;
}

void Backend::deallocate_pinned(void* p) noexcept { std::free(p); }

std::unique_ptr<UploadLane> Backend::make_upload_lane(int /*marks*/) {
  return std::make_unique<InOrderLane>(*this);
}

}  // namespace lamina
