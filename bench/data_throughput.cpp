// Images per second through the host-fed image pipelines, on the Native backend (what is
// measured is the host: reading, JPEG decoding, transforms, the copy into the batch):
//   Data       over an LMDB of encoded 256 x 256 JPEG Datums;
//   ImageData  over the same JPEGs as files and a list.
// Both with ImageNet's training transforms: crop 227 (random), mirror, a mean_file; batch 256.
// The images are made by the benchmark: gradients under per-pixel noise, so that JPEG has
// real work (about 40 KB a file at quality 95, as cv::imencode writes). Only forward passes
// are timed, after a warm-up; the prefetch pool uses one thread per core (up to 16). On the
// Native backend (the default) the main thread also copies each batch twice (the upload and
// the gather are memcpys); with --gpu the upload is an asynchronous copy and the gather runs
// on the GPU, so the rate is the pool's (the device is synchronized before the clock is read).
//   data_throughput [--images 1024] [--batches 8] [--warmup 2] [--dir /tmp/x] [--gpu N]
#include <CLI/CLI.hpp>
#include <glog/logging.h>
#include <google/protobuf/text_format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "lamina/backend_factory.hpp"
#include "lamina/counter_rng.hpp"
#include "lamina/data_tools.hpp"
#include "lamina/database.hpp"
#include "lamina/image.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/registry.hpp"
#include "lamina/tensor.hpp"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kSide = 256, kCrop = 227, kBatch = 256;

// Image i: smooth gradients that differ per image and channel, under 5 bits of noise.
lamina::Image synthetic_image(int i) {
  lamina::Image image;
  image.reshape(kSide, kSide, 3);
  for (int y = 0; y < kSide; ++y)
    for (int x = 0; x < kSide; ++x)
      for (int c = 0; c < 3; ++c) {
        const uint64_t noise = lamina::counter_hash(uint64_t(i), uint64_t((y * kSide + x) * 3 + c));
        const int smooth = (x * (3 + c) + y * (2 + i % 5)) / 3 % 224;
        image.pixels[size_t((y * kSide + x) * 3 + c)] = uint8_t(smooth + int(noise & 31));
      }
  return image;
}

// Times `batches` forward passes of the layer after `warmup`; images per second.
double images_per_second(lamina::Backend& backend, const std::string& text, int warmup,
                         int batches) {
  lamina::LayerParameter param;
  CHECK(google::protobuf::TextFormat::ParseFromString(text, &param)) << text;
  auto layer =
      lamina::LayerRegistry::create(param, lamina::LayerContext{backend, lamina::TRAIN, 1});
  lamina::Tensor data(backend, {1}), label(backend, {1});
  layer->setup({}, {&data, &label});
  for (int b = 0; b < warmup; ++b) layer->forward({}, {&data, &label});
  backend.synchronize();
  const auto start = Clock::now();
  for (int b = 0; b < batches; ++b) layer->forward({}, {&data, &label});
  backend.synchronize();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return double(batches) * kBatch / seconds;
}

}  // namespace

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = 1;
  CLI::App app{"Images per second of the Data and ImageData layers over 256 x 256 JPEGs"};
  int images = 1024, batches = 8, warmup = 2;
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("lamina_data_throughput_" + std::to_string(::getpid())))
                        .string();
  app.add_option("--images", images, "JPEGs made (the epoch)")->capture_default_str();
  app.add_option("--batches", batches, "Batches of 256 timed")->capture_default_str();
  app.add_option("--warmup", warmup, "Batches run before timing")->capture_default_str();
  app.add_option("--dir", dir, "Where the JPEGs, the LMDB and the mean go (removed after)");
  std::string gpu = "-1";
  app.add_option("--gpu", gpu, "Feed this GPU; -1 (the default) the Native backend");
  CLI11_PARSE(app, argc, argv);
  try {
    LAMINA_REQUIRE(images > 0 && batches > 0 && warmup >= 0, "--images and --batches must be "
                   "> 0, --warmup >= 0");
    std::unique_ptr<lamina::Backend> backend =
        lamina::make_backend(lamina::backend_spec_from_gpu(gpu));
    std::filesystem::create_directories(dir + "/jpg");
    const std::string lmdb = dir + "/lmdb", list = dir + "/list.txt";
    const auto made = Clock::now();
    {
      auto db = lamina::create_db(lmdb, lamina::DbKind::kLmdb);
      std::ofstream listing(list);
      double bytes = 0;
      for (int i = 0; i < images; ++i) {
        const std::string jpg = lamina::encode_image(synthetic_image(i), "jpg");
        bytes += double(jpg.size());
        const std::string name = std::to_string(i) + ".jpg";
        std::ofstream(dir + "/jpg/" + name, std::ios::binary) << jpg;
        listing << name << " " << i % 1000 << "\n";
        lamina::Datum datum;
        datum.set_data(jpg);
        datum.set_label(i % 1000);
        datum.set_encoded(true);
        char key[16];
        std::snprintf(key, sizeof key, "%08d", i);
        db->put(key, datum.SerializeAsString());
      }
      db->commit();
      std::printf("made %d JPEGs of %d x %d (%.1f KB each) in %.1f s\n", images, kSide, kSide,
                  bytes / images / 1024,
                  std::chrono::duration<double>(Clock::now() - made).count());
    }
    const std::string mean = dir + "/mean.binaryproto";
    lamina::write_blob_proto(lamina::compute_image_mean(lmdb, lamina::DbKind::kLmdb), mean);
    const std::string transform = " transform_param { crop_size: " + std::to_string(kCrop) +
                                  " mirror: true mean_file: '" + mean + "' }";
    const unsigned cores = std::thread::hardware_concurrency();
    std::printf("batch %d, crop %d, mirror, mean_file; %d batches timed after %d; %s, %u "
                "cores (the prefetch pool: one thread per core, up to 16)\n",
                kBatch, kCrop, batches, warmup, backend->name().c_str(), cores);
    const double data = images_per_second(
        *backend, "name: 'data' type: 'Data' top: 'data' top: 'label' data_param { source: '" + lmdb +
            "' backend: LMDB batch_size: " + std::to_string(kBatch) + " }" + transform,
        warmup, batches);
    std::printf("%-34s %8.0f images/s\n", "Data (LMDB of encoded JPEGs):", data);
    const double image_data = images_per_second(
        *backend, "name: 'data' type: 'ImageData' top: 'data' top: 'label' image_data_param { source: '" +
            list + "' root_folder: '" + dir + "/jpg/' shuffle: true batch_size: " +
            std::to_string(kBatch) + " }" + transform,
        warmup, batches);
    std::printf("%-34s %8.0f images/s\n", "ImageData (JPEG files, shuffled):", image_data);
  } catch (const lamina::Error& e) {
    std::fprintf(stderr, "data_throughput: error: %s\n", e.what());
    std::filesystem::remove_all(dir);
    return 1;
  }
  std::filesystem::remove_all(dir);
  return 0;
}
