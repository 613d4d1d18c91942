// two_gpu_split: a 32-layer decoder stack split 16/16 over two devices, trained a few steps and
// checked against the same model on one device. The model, the split and the pipelined variant
// are in model_split.h; this file is the program around them (flags, runs, comparison, timing).
//
//   build/examples/two_gpu_split                              # cuda:0,cuda:1 with 2 GPUs, else cpu,cpu
//   build/examples/two_gpu_split --devices cpu,cpu --dtype bf16
//   build/examples/two_gpu_split --d-model 1024 --heads 16 --seq 512 --batch 8 --non-blocking
//       --micro-batches 4                                     # (one line) streams, events, overlap
//
// It prints the max relative difference (max |a - b| / max |b|) of the loss, the output and every
// gradient between the split run and the one-device run, and exits 1 when one exceeds the
// dtype's tolerance (model_split::tolerance_for) or when the loss did not go down.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "model_split.h"
#include "trireme/optim/adamw.h"

using namespace trireme;
using namespace model_split;

namespace {

struct Options {
  ModelConfig model;
  std::string devices;  // "" : cuda:0,cuda:1 when two GPUs exist, else cpu,cpu
  int64_t split = 0;    // 0: half the layers
  int steps = 6;
  int micro_batches = 1;
  bool non_blocking = false;
  double lr = 0;         // 0: model_split::default_lr (1e-3 * 64 / d_model)
};

[[noreturn]] void usage(const std::string& error) {
  std::cerr << "two_gpu_split: " << error << "\n"
            << "usage: two_gpu_split [--devices A,B] [--layers N] [--split K] [--d-model C] [--heads H]\n"
            << "                     [--seq T] [--batch B] [--dtype f32|bf16|f16|f64] [--steps S]\n"
            << "                     [--micro-batches M] [--non-blocking] [--lr LR] [--seed S]\n";
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    auto integer = [&]() -> int64_t {
      const std::string v = value();
      try {
        size_t used = 0;
        const int64_t n = std::stoll(v, &used);
        if (used == v.size() && n >= 0) return n;
      } catch (const std::exception&) {
      }
      usage(a + " takes a non-negative integer, got '" + v + "'");
    };
    if (a == "--devices") o.devices = value();
    else if (a == "--layers") o.model.layers = integer();
    else if (a == "--split") o.split = integer();
    else if (a == "--d-model") o.model.d_model = integer();
    else if (a == "--heads") o.model.heads = integer();
    else if (a == "--seq") o.model.seq = integer();
    else if (a == "--batch") o.model.batch = integer();
    else if (a == "--seed") o.model.seed = uint64_t(integer());
    else if (a == "--steps") o.steps = int(integer());
    else if (a == "--micro-batches") o.micro_batches = int(integer());
    else if (a == "--non-blocking") o.non_blocking = true;
    else if (a == "--lr") {
      const std::string v = value();
      try {
        size_t used = 0;
        o.lr = std::stod(v, &used);
        if (used != v.size() || !(o.lr > 0)) throw std::invalid_argument(v);
      } catch (const std::exception&) {
        usage("--lr takes a positive number, got '" + v + "'");
      }
    }
    else if (a == "--dtype") {
      try {
        o.model.dtype = dtype_from_name(value());
      } catch (const Error& e) {
        usage(e.what());
      }
    } else if (a == "--help" || a == "-h") usage("help");
    else usage("unknown flag " + a);
  }
  if (o.model.layers < 1 || o.steps < 1 || o.micro_batches < 1) usage("--layers, --steps and --micro-batches must be >= 1");
  return o;
}

// Median step time, leaving out step 0 (first-use allocations and cuBLASLt plans) when possible.
double median_ms(std::vector<double> ms) {
  if (ms.size() > 1) ms.erase(ms.begin());
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Prints the differences of `run` from `ref`; returns false when one exceeds `tol`.
bool compare(const char* what, const RunRecord& run, const RunRecord& ref, double tol) {
  auto rel = [](double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); };
  double loss_diff = 0;
  for (size_t s = 0; s < ref.losses.size(); ++s) loss_diff = std::max(loss_diff, rel(run.losses[s], ref.losses[s]));
  const double out_diff = max_rel_diff(run.output, ref.output);
  double grad_diff = 0;
  std::string worst;
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    const double d = max_rel_diff(run.grads[i].second, ref.grads[i].second);
    if (d >= grad_diff) grad_diff = d, worst = ref.grads[i].first;
  }
  const bool ok = loss_diff <= tol && out_diff <= tol && grad_diff <= tol;
  std::printf("%-28s loss (all %zu steps) %.3g   output %.3g   gradients (%zu) %.3g (worst: %s)   %s\n", what,
              ref.losses.size(), loss_diff, out_diff, ref.grads.size(), grad_diff, worst.c_str(),
              ok ? "ok" : "BEYOND TOLERANCE");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  try {
    if (o.devices.empty()) o.devices = cuda::device_count() >= 2 ? "cuda:0,cuda:1" : "cpu,cpu";
    const size_t comma = o.devices.find(',');
    if (comma == std::string::npos) usage("--devices takes two devices, e.g. cuda:0,cuda:1");
    Placement split{Device::parse(o.devices.substr(0, comma)), Device::parse(o.devices.substr(comma + 1)),
                    size_t(o.split)};
    if (o.non_blocking && !(split.first.is_cuda() && split.second.is_cuda())) {
      usage("--non-blocking needs two CUDA devices (streams and events are CUDA's), got " + o.devices);
    }
    Placement single{split.first, split.first, 0};  // the reference: everything on device A
    const double tol = tolerance_for(o.model.dtype);
    const ModelConfig& m = o.model;
    const double lr = o.lr > 0 ? o.lr : default_lr(m);
    std::printf("model: %lld decoder layers, d_model %lld, %lld heads, T %lld, batch %lld, %s; %d steps of AdamW, "
                "lr %.3g (2 warmup steps)%s\n",
                (long long)m.layers, (long long)m.d_model, (long long)m.heads, (long long)m.seq, (long long)m.batch,
                std::string(dtype_name(m.dtype)).c_str(), o.steps, lr, o.lr > 0 ? "" : " = 1e-3 * 64 / d_model");
    std::printf("task: predict the previous position's input (loss 2 means the model learned to stay out of the way; "
                "below 2, it looks back)\n");
    std::printf("split: layers [0, %lld) on %s, the rest on %s; %d micro-batch(es); tolerance %.0e (%s)\n",
                (long long)(o.split ? o.split : m.layers / 2), split.first.str().c_str(), split.second.str().c_str(),
                o.micro_batches, tol, std::string(dtype_name(m.dtype)).c_str());

    RunRecord ref = train(o.model, single, {.micro_batches = 1, .non_blocking = false}, o.steps, lr);
    RunRecord plain = train(o.model, split, {.micro_batches = o.micro_batches, .non_blocking = false}, o.steps, lr);
    bool ok = compare("split vs one device:", plain, ref, tol);
    std::printf("  loss per step: ");
    for (double l : plain.losses) std::printf("%.6f ", l);
    std::printf("\n");
    // The split must also train: a run whose loss goes up proves equality of a broken run.
    const bool trains = plain.losses.size() < 2 || plain.losses.back() < plain.losses.front();
    if (!trains) {
      std::printf("  the loss did not go down (%.6f -> %.6f): lower --lr\n", plain.losses.front(), plain.losses.back());
    }
    ok = ok && trains;

    std::printf("step time (forward + backward, median of steps 1..): one device %.2f ms, split %.2f ms\n",
                median_ms(ref.step_ms), median_ms(plain.step_ms));
    if (o.non_blocking) {
      RunRecord piped = train(o.model, split, {.micro_batches = o.micro_batches, .non_blocking = true}, o.steps, lr);
      ok = compare("pipelined split vs one device:", piped, ref, tol) && ok;
      const double t_plain = median_ms(plain.step_ms), t_piped = median_ms(piped.step_ms);
      const double ideal = double(o.micro_batches + 1) / (2.0 * o.micro_batches);
      // With the two halves equally fast, the plain split costs 2M half-steps and the pipeline
      // M + 1 (one to fill, one to drain): (M + 1) / 2M of the plain time when all else overlaps.
      std::printf("pipelined (streams + events, %d micro-batches): %.2f ms = %.3f of the plain split's %.2f ms "
                  "(ideal overlap: %.3f)\n",
                  o.micro_batches, t_piped, t_piped / t_plain, t_plain, ideal);
    }
    std::printf("%s\n", ok ? "PASS" : "FAIL: a difference is beyond the tolerance, or the loss did not go down");
    return ok ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "two_gpu_split: %s\n", e.what());
    return 1;
  }
}
