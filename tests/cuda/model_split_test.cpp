// Two devices in one process: the model-split example on cuda:0 / cuda:1 against one GPU (f32 and
// bf16, plain and pipelined), and the guarantees under it (issue 5): the gradient of a copy to
// another device lands on the source device; a consumer on another device or stream that waits
// on an event never reads before the copy is done; pinned non_blocking copies to and from the
// host. Tests needing two GPUs skip with fewer.
#include <cstring>

#include "../../examples/model_split/model_split.h"
#include "cuda_test_util.h"
#include "trireme/ops/linalg.h"

namespace trireme {
namespace {

using testing::expect_close;

#ifdef TRIREME_WITH_CUDA

#define TRIREME_REQUIRE_TWO_GPUS()                                                  \
  do {                                                                              \
    TRIREME_REQUIRE_GPU();                                                          \
    if (cuda::device_count() < 2) GTEST_SKIP() << "needs two GPUs";                 \
  } while (0)

// Keeps a stream busy for a while (a chain of dependent matmuls), so that a consumer that does not
// wait would run ahead of it. The values stay O(1) and varied (tanh of a gain-2 random map), so
// reading the buffer too early (stale or fresh memory) cannot pass for the result.
void keep_busy(Tensor& x, int rounds) {
  Generator gen(99);
  const int64_t n = x.size(1);
  Tensor w = to_device(mul(randn({n, n}, gen), 2.0 / std::sqrt(double(n))), x.device());
  for (int i = 0; i < rounds; ++i) x = tanh(matmul(x, w));
}

TEST(CudaCrossDevice, GradientOfACopyLandsOnTheSourceDevice) {
  TRIREME_REQUIRE_TWO_GPUS();
  Generator gen(11);
  Tensor host = randn({64, 32}, gen, DType::f64);
  Tensor x = to_device(host, Device::cuda(0)).set_requires_grad(true);
  Tensor y = to_device(x, Device::cuda(1));
  ASSERT_EQ(y.device(), Device::cuda(1));
  Tensor loss = sum(mul(mul(y, y), 1.5));  // d/dx = 3 x
  loss.backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().device(), Device::cuda(0));
  expect_close(x.grad(), mul(host, 3.0), 0.0, "grad of to(cuda:1)");
  // And through a layer on each device: a linear on cuda:0, then one on cuda:1.
  Tensor w0 = to_device(randn({32, 32}, gen, DType::f64), Device::cuda(0)).set_requires_grad(true);
  Tensor w1 = to_device(randn({32, 32}, gen, DType::f64), Device::cuda(1)).set_requires_grad(true);
  Tensor out = matmul(to_device(matmul(x.detach(), w0), Device::cuda(1)), w1);
  sum(out).backward();
  EXPECT_EQ(w0.grad().device(), Device::cuda(0));
  EXPECT_EQ(w1.grad().device(), Device::cuda(1));
  // The same on the CPU: d sum(x w0 w1) / d w0 = x^T (1 w1^T).
  Tensor xc = host.detach(), w0c = to_device(w0.detach(), Device::cpu()), w1c = to_device(w1.detach(), Device::cpu());
  Tensor ones_out = ones({64, 32}, DType::f64);
  expect_close(w0.grad(), matmul(transpose(xc, 0, 1), matmul(ones_out, transpose(w1c, 0, 1))), 1e-10, "w0 grad");
  expect_close(w1.grad(), matmul(transpose(matmul(xc, w0c), 0, 1), ones_out), 1e-10, "w1 grad");
}

TEST(CudaCrossDevice, AConsumerOnAnotherDeviceAndStreamWaitsForTheCopy) {
  TRIREME_REQUIRE_TWO_GPUS();
  Generator gen(12);
  const int64_t n = 2048;
  Tensor start = randn({n, n}, gen);
  cuda::Stream producer = cuda::Stream::create(0), copy_stream = cuda::Stream::create(1),
               consumer = cuda::Stream::create(1);
  Tensor x = to_device(start, Device::cuda(0));
  cuda::synchronize(0);
  Tensor moved, result;
  {
    cuda::StreamGuard on_producer(producer);
    keep_busy(x, 30);  // queued on cuda:0; the host goes on at once
    cuda::StreamGuard on_copy(copy_stream);
    moved = to_device(x, Device::cuda(1), /*non_blocking=*/true);  // after the producer's work
  }
  cuda::Event copied;
  copied.record(copy_stream);
  {
    cuda::StreamGuard on_consumer(consumer);
    copied.wait(consumer);
    result = add(moved, 1.0);
  }
  consumer.synchronize();
  // The same chain on cuda:0's default stream, waited for by the host.
  Tensor expect = to_device(start, Device::cuda(0));
  keep_busy(expect, 30);
  expect_close(result, add(to_device(expect, Device::cpu()), 1.0), 1e-5, "consumer on cuda:1's other stream");
  copy_stream.synchronize();
}

TEST(CudaPinned, PinnedTensorsAreFlaggedAndChecked) {
  TRIREME_REQUIRE_GPU();
  Generator gen(13);
  Tensor pageable = randn({100, 7}, gen);
  EXPECT_FALSE(cuda::is_pinned(pageable));
  Tensor pinned = cuda::pin_memory(pageable);
  EXPECT_TRUE(cuda::is_pinned(pinned));
  EXPECT_TRUE(pinned.device().is_cpu());
  EXPECT_EQ(std::memcmp(pinned.data_ptr(), pageable.data_ptr(), 700 * sizeof(float)), 0);
  EXPECT_TRUE(cuda::is_pinned(narrow(pinned, 0, 10, 20)));  // a view into pinned memory
  EXPECT_TRUE(cuda::pin_memory(pinned).same(pinned));       // already pinned: no copy
  EXPECT_THROW(cuda::pin_memory(to_device(pageable, Device::cuda(0))), Error);
  EXPECT_EQ(cuda::empty_pinned({0}, DType::bf16).numel(), 0);
}

TEST(CudaPinned, NonBlockingRoundTripOnASideStream) {
  TRIREME_REQUIRE_GPU();
  Generator gen(14);
  for (DType dt : {DType::f32, DType::bf16, DType::i64}) {
    Tensor host = to_dtype(mul(randn({333, 17}, gen), 100.0), dt);
    Tensor src = cuda::pin_memory(host), dst = cuda::empty_pinned(host.sizes(), dt);
    cuda::Stream side = cuda::Stream::create(0);
    cuda::Event done;
    {
      cuda::StreamGuard g(side);
      Tensor dev = to_device(src, Device::cuda(0), /*non_blocking=*/true);  // queued on `side`
      Tensor twice = add(dev, dev);                                          // same stream: after the copy
      copy_(dst, twice, /*non_blocking=*/true);                              // into pinned memory, queued
      done.record(side);
    }
    done.synchronize();  // the host waits before it reads dst (Note [pinned copies])
    expect_close(to_device(dst, Device::cuda(0)), add(host, host), 0.0,
                 std::string("pinned round trip ") + std::string(dtype_name(dt)));
  }
}

TEST(CudaPinned, FreeingAPinnedSourceWaitsForItsCopy) {
  TRIREME_REQUIRE_GPU();
  Generator gen(15);
  const int64_t n = 1 << 22;
  Tensor expect = randn({n}, gen);
  Tensor busy = to_device(randn({2048, 2048}, gen), Device::cuda(0));
  cuda::synchronize(0);
  Tensor dev;
  {
    Tensor src = cuda::pin_memory(expect);
    keep_busy(busy, 30);  // the copy below waits behind this on the stream
    dev = to_device(src, Device::cuda(0), /*non_blocking=*/true);
  }  // src is freed here, possibly before the copy ran: its release waits for the copy
  Tensor junk = full({n}, -7.0);  // would likely land on src's pages if they had been freed early
  expect_close(dev, expect, 0.0, "copy from a pinned tensor freed while queued");
  EXPECT_EQ(junk.at({0}), -7.0);
}

TEST(CudaPinned, NonBlockingFromPageableMemoryIsSafe) {
  TRIREME_REQUIRE_GPU();
  Generator gen(16);
  Tensor expect = randn({1 << 20}, gen);
  Tensor dev;
  {
    Tensor src = clone(expect);  // pageable: the copy is done on return
    dev = to_device(src, Device::cuda(0), /*non_blocking=*/true);
  }
  expect_close(dev, expect, 0.0, "non_blocking from pageable memory");
  Tensor back = Tensor::empty(expect.sizes(), DType::f32);
  copy_(back, dev, /*non_blocking=*/true);  // into pageable memory: done on return
  EXPECT_EQ(std::memcmp(back.data_ptr(), expect.data_ptr(), size_t(expect.numel()) * 4), 0);
}

// The example's core, as the program runs it: cuda:0 / `second` against everything on cuda:0.
void check_split(DType dtype, const model_split::Schedule& schedule, double tol, Device second = Device::cuda(1),
                 const model_split::ModelConfig& c_in = {.layers = 8, .d_model = 128, .heads = 4, .seq = 32, .batch = 4}) {
  model_split::ModelConfig c = c_in;
  c.dtype = dtype;
  auto ref = model_split::train(c, {Device::cuda(0), Device::cuda(0), size_t(c.layers)}, {}, 2);
  auto run = model_split::train(c, {Device::cuda(0), second, size_t(c.layers / 2)}, schedule, 2);
  for (size_t s = 0; s < ref.losses.size(); ++s) {
    EXPECT_LE(std::abs(run.losses[s] - ref.losses[s]), tol * std::abs(ref.losses[s])) << "loss of step " << s;
  }
  EXPECT_EQ(run.output.device(), second);
  EXPECT_LE(model_split::max_rel_diff(run.output, ref.output), tol) << "output";
  ASSERT_EQ(run.grads.size(), ref.grads.size());
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    EXPECT_EQ(run.grads[i].second.device(), i < ref.grads.size() / 2 ? Device::cuda(0) : second) << run.grads[i].first;
    EXPECT_LE(model_split::max_rel_diff(run.grads[i].second, ref.grads[i].second), tol) << ref.grads[i].first;
  }
}

TEST(CudaModelSplit, TwoGpusEqualOneGpu) {
  TRIREME_REQUIRE_TWO_GPUS();
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    // One micro-batch: the same kernels on the same kind of GPU, so equal up to the kernels' own
    // run-to-run variation (none expected); the tolerance is the example's.
    check_split(dt, {}, model_split::tolerance_for(dt));
  }
}

TEST(CudaModelSplit, PipelinedWithStreamsAndEventsEqualsOneGpu) {
  TRIREME_REQUIRE_TWO_GPUS();
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    check_split(dt, {.micro_batches = 4, .non_blocking = true}, model_split::tolerance_for(dt));
  }
}

// Both halves on one GPU, each on its own stream (the example's `--devices cuda:0,cuda:0
// --non-blocking`): no copy at the split, but the second stream must still wait for the first.
// The model is wide enough that the first half's kernels are still running when the second
// stream would start without that wait.
TEST(CudaModelSplit, PipelinedOnOneGpuWithTwoStreamsEqualsOneStream) {
  TRIREME_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dt)));
    check_split(dt, {.micro_batches = 4, .non_blocking = true}, model_split::tolerance_for(dt), Device::cuda(0),
                {.layers = 8, .d_model = 512, .heads = 8, .seq = 256, .batch = 8});
  }
}

#endif  // TRIREME_WITH_CUDA

}  // namespace
}  // namespace trireme
