// The CUDA runtime: device detection, the caching allocator, streams and events, copies.
#include <gtest/gtest.h>

#include <cstdio>

#include "cuda_test_util.h"
#include "trireme/core/allocator.h"
#include "trireme/ops/elementwise.h"
#include "trireme/runtime/gpu_topology.h"

#ifdef TRIREME_WITH_CUDA
#include "trireme/cuda/allocator.h"
#include "trireme/cuda/stream.h"
#endif

namespace trireme {
namespace {

using testing::expect_close;

TEST(CudaDevice, DetectionNeverThrows) {
  // Must hold on every machine: a count (0 without a GPU) and a reason when there is none.
  const int n = cuda::device_count();
  EXPECT_GE(n, 0);
  EXPECT_EQ(cuda::is_available(), n > 0);
  if (n == 0) {
    EXPECT_FALSE(cuda::unavailable_reason().empty());
  }
}

TEST(CudaDevice, CpuStillWorksWithoutGpu) {
  Tensor x = ones({3, 4});
  Tensor y = x * 2.0 + 1.0;
  EXPECT_DOUBLE_EQ(y.at({2, 3}), 3.0);
  if (!cuda::is_available()) {
    EXPECT_THROW(Tensor::empty({2}, DType::f32, Device::cuda(0)), Error);
  }
}

#ifdef TRIREME_WITH_CUDA

TEST(CudaAllocator, SizeClasses) {
  EXPECT_EQ(cuda::allocation_size_class(0), 512u);
  EXPECT_EQ(cuda::allocation_size_class(1), 512u);
  EXPECT_EQ(cuda::allocation_size_class(513), 1024u);
  EXPECT_EQ(cuda::allocation_size_class(1 << 20), size_t(1) << 20);
  EXPECT_EQ(cuda::allocation_size_class((1 << 20) + 1), size_t(1) << 20 | size_t(1) << 18);
  for (size_t n : {size_t(3) << 20, size_t(100) << 20, (size_t(1) << 30) + 7}) {
    size_t c = cuda::allocation_size_class(n);
    EXPECT_GE(c, n);
    EXPECT_LE(double(c), 1.25 * double(n) + 1.0);
  }
}

TEST(CudaDevice, TopologyNamesEachGpusLinksAndEveryPair) {
  TRIREME_REQUIRE_GPU();
  const nlohmann::json t = runtime::gpu_topology();
  ASSERT_FALSE(t.contains("unavailable")) << t.dump();  // a GPU machine has the driver's NVML
  const int n = cuda::device_count();
  ASSERT_EQ(int(t["links"].size()), n) << t.dump();
  ASSERT_EQ(int(t["pairs"].size()), n * (n - 1) / 2) << t.dump();
  for (const auto& [key, value] : t["pairs"].items()) EXPECT_NE(value.get<std::string>(), "unknown") << key;
  std::printf("gpu topology: %s\n", t.dump().c_str());
}

TEST(CudaDevice, SetDeviceChecksTheIndex) {
  TRIREME_REQUIRE_GPU();
  EXPECT_THROW(cuda::set_device(cuda::device_count()), Error);
  cuda::set_device(0);
  EXPECT_EQ(cuda::current_device(), 0);
}

TEST(CudaAllocator, ReusesFreedBlocksAndCounts) {
  TRIREME_REQUIRE_GPU();
  const Device dev = Device::cuda(0);
  cuda::synchronize();
  cuda::empty_cache();
  const MemoryStats before = memory_stats(dev);
  void* first = nullptr;
  {
    Tensor a = Tensor::empty({1000, 1000}, DType::f32, dev);
    first = a.data_ptr();
    MemoryStats s = memory_stats(dev);
    EXPECT_EQ(s.allocated_bytes - before.allocated_bytes, 4000000);
    EXPECT_GE(s.reserved_bytes - before.reserved_bytes, 4000000);
    EXPECT_GE(s.peak_bytes, s.allocated_bytes);
  }
  MemoryStats after_free = memory_stats(dev);
  EXPECT_EQ(after_free.allocated_bytes, before.allocated_bytes);
  EXPECT_GT(after_free.reserved_bytes, before.reserved_bytes) << "the block stays cached";
  Tensor b = Tensor::empty({999, 1001}, DType::f32, dev);  // same size class
  EXPECT_EQ(b.data_ptr(), first) << "a freed block of the same class is reused";
  EXPECT_EQ(memory_stats(dev).reserved_bytes, after_free.reserved_bytes) << "no new driver allocation";
  b = Tensor();
  cuda::empty_cache();
  EXPECT_EQ(memory_stats(dev).reserved_bytes, before.reserved_bytes);
  reset_peak_memory(dev);
  EXPECT_EQ(memory_stats(dev).peak_bytes, memory_stats(dev).allocated_bytes);
}

TEST(CudaAllocator, BlocksStayWithTheirStream) {
  TRIREME_REQUIRE_GPU();
  cuda::Stream side = cuda::Stream::create(0);
  void* p = nullptr;
  { p = Tensor::empty({4096}, DType::f32, Device::cuda(0)).data_ptr(); }
  cuda::StreamGuard g(side);
  Tensor t = Tensor::empty({4096}, DType::f32, Device::cuda(0));
  EXPECT_NE(t.data_ptr(), p) << "a block freed on the default stream is not handed to another stream";
}

TEST(CudaAllocator, OutOfMemoryIsAnError) {
  TRIREME_REQUIRE_GPU();
  EXPECT_THROW(Tensor::empty({int64_t(1) << 50}, DType::f32, Device::cuda(0)), Error);
  Tensor ok = zeros({16}, DType::f32, Device::cuda(0));  // and the allocator still works
  EXPECT_EQ(to_device(ok, Device::cpu()).at({3}), 0.0);
}

TEST(CudaStream, GuardSwitchesAndRestores) {
  TRIREME_REQUIRE_GPU();
  cuda::Stream def = cuda::current_stream(0);
  cuda::Stream side = cuda::Stream::create(0, true);
  {
    cuda::StreamGuard g(side);
    EXPECT_EQ(cuda::current_stream(0), side);
  }
  EXPECT_EQ(cuda::current_stream(0), def);
}

TEST(CudaStream, EventsOrderWorkAcrossStreams) {
  TRIREME_REQUIRE_GPU();
  const Device dev = Device::cuda(0);
  cuda::Stream producer = cuda::Stream::create(0), consumer = cuda::Stream::create(0);
  Tensor x = Tensor::empty({1 << 24}, DType::f32, dev);  // allocated on the default stream
  cuda::synchronize();
  cuda::Event ready;
  {
    cuda::StreamGuard g(producer);
    fill_(x, 1.0);
    for (int i = 0; i < 20; ++i) add_(x, 1.0);  // keeps the producer busy a while
    ready.record(producer);
  }
  Tensor y;
  {
    cuda::StreamGuard g(consumer);
    ready.wait(consumer);
    y = mul(x, 2.0);
    cuda::Event done;
    done.record(consumer);
    done.synchronize();
    EXPECT_TRUE(done.query());
  }
  cuda::synchronize();
  EXPECT_EQ(to_device(y, Device::cpu()).at({(1 << 24) - 1}), 42.0);
}

TEST(CudaStream, EventTiming) {
  TRIREME_REQUIRE_GPU();
  cuda::Event start(true), end(true);
  Tensor x = zeros({1 << 22}, DType::f32, Device::cuda(0));
  start.record();
  for (int i = 0; i < 10; ++i) add_(x, 1.0);
  end.record();
  end.synchronize();
  EXPECT_GT(start.elapsed_ms(end), 0.0f);
  EXPECT_THROW(cuda::Event().elapsed_ms(end), Error);
}

TEST(CudaCopy, HostDeviceRoundTripEveryDtype) {
  TRIREME_REQUIRE_GPU();
  Generator gen(7);
  for (DType dt : {DType::f64, DType::f32, DType::bf16, DType::f16, DType::i64, DType::i32, DType::boolean}) {
    Tensor host = to_dtype(mul(randn({37, 5}, gen), 10.0), dt);
    Tensor dev = to_device(host, Device::cuda(0));
    EXPECT_EQ(dev.device(), Device::cuda(0));
    Tensor back = to_device(dev, Device::cpu());
    EXPECT_EQ(std::memcmp(back.data_ptr(), host.data_ptr(), size_t(host.numel()) * host.element_size()), 0)
        << dtype_name(dt);
  }
}

TEST(CudaCopy, ConversionsAndStridesMatchTheCpu) {
  TRIREME_REQUIRE_GPU();
  Generator gen(8);
  const std::vector<DType> all = {DType::f64, DType::f32, DType::bf16, DType::f16, DType::i64, DType::i32, DType::boolean};
  Tensor base = mul(randn({6, 9}, gen), 50.0);
  for (DType from : all) {
    Tensor src = to_dtype(base, from);
    Tensor src_gpu = to_device(src, Device::cuda(0));
    for (DType to : all) {
      expect_close(to_dtype(src_gpu, to), to_dtype(src, to), 0.0,
                   std::string("to_dtype ") + std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to)));
    }
    // A transposed (non-contiguous) source and destination.
    Tensor t_cpu = src.alias({9, 6}, {1, 9}, 0), t_gpu = src_gpu.alias({9, 6}, {1, 9}, 0);
    expect_close(contiguous(t_gpu), contiguous(t_cpu), 0.0, "contiguous of a transpose");
    Tensor dst_gpu = zeros({6, 9}, from, Device::cuda(0)).alias({9, 6}, {1, 9}, 0);
    copy_(dst_gpu, t_gpu);
    expect_close(dst_gpu, t_cpu, 0.0, "copy_ into a strided destination");
  }
}

TEST(CudaCopy, FillAndFactories) {
  TRIREME_REQUIRE_GPU();
  for (DType dt : {DType::f64, DType::f32, DType::bf16, DType::f16, DType::i64, DType::i32, DType::boolean}) {
    expect_close(full({3, 7}, 2.5, dt, Device::cuda(0)), full({3, 7}, 2.5, dt), 0.0, "full");
  }
  expect_close(arange(10, DType::i64, Device::cuda(0)), arange(10), 0.0, "arange");
  Generator g1(3), g2(3);
  expect_close(randn({5, 5}, g1, DType::f32, Device::cuda(0)), randn({5, 5}, g2), 0.0, "randn is device-independent");
}

TEST(CudaCopy, DeviceToDevice) {
  TRIREME_REQUIRE_GPU();
  if (cuda::device_count() < 2) GTEST_SKIP() << "needs two GPUs";
  Generator gen(9);
  Tensor host = randn({123, 45}, gen);
  Tensor a = to_device(host, Device::cuda(0));
  Tensor b = to_device(a, Device::cuda(1));
  EXPECT_EQ(b.device(), Device::cuda(1));
  expect_close(b, host, 0.0, "cuda:0 -> cuda:1");
}

#endif  // TRIREME_WITH_CUDA

}  // namespace
}  // namespace trireme
