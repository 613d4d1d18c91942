// Loading a checkpoint's model for inference (see trained_model.h).
#include "trireme/train/trained_model.h"

#include "trireme/core/error.h"
#include "trireme/cuda/device.h"
#include "trireme/models/lora.h"
#include "trireme/train/checkpoint.h"
#include "trireme/train/hf_checkpoint.h"
#include "trireme/train/memory_check.h"
#include "trireme/train/step_runner.h"

namespace fs = std::filesystem;

namespace trireme::train {

namespace {
void check_device(Device device, const std::string& who) {
  if (!device.is_cuda()) return;
  TRIREME_CHECK(cuda::is_available(), who, ": the device is ", device.str(), ", but no GPU can be used: ",
                cuda::unavailable_reason(), "; use --device cpu");
  TRIREME_CHECK(device.index < cuda::device_count(), who, ": the device is ", device.str(), ", but this machine has ",
                cuda::device_count(), " GPU(s)");
#ifdef TRIREME_WITH_CUDA
  cuda::set_device(device.index);
#endif
}
}  // namespace

namespace {
// A Hugging Face model folder read in place (train/hf_checkpoint.h), as `import hf` would convert it.
TrainedModel load_hf_model(const std::string& folder, Device device, const std::string& who, bool memory_check) {
  HfModel hf = read_hf_model(folder);
  if (hf.tokenizer.is_null())
    throw io::ConfigError(str_cat(who, ": '", folder, "' has no tokenizer.json, which ", who, " needs"));
  TrainedModel m;
  m.dir = folder;
  m.config = config_for_gpt(hf.config).resolve();
  m.tokenizer = io::tokenizer_from_json(hf.tokenizer);
  if (memory_check) check_inference_memory(hf.config, device);
  m.model = std::make_unique<models::GPT>(hf.config, 0);
  m.model->load_full_state_dict(hf.weights);
  if (!device.is_cpu()) m.model->to(device);
  m.model->eval();
  return m;
}
}  // namespace

TrainedModel load_trained_model(const std::string& checkpoint, Device device, const std::string& who,
                                bool memory_check) {
  check_device(device, who);
  if (fs::exists(fs::path(checkpoint) / "config.json") && !fs::exists(fs::path(checkpoint) / "state.json"))
    return load_hf_model(checkpoint, device, who, memory_check);
  auto dir = find_latest_checkpoint(checkpoint);
  TRIREME_CHECK(dir.has_value(), who, ": no checkpoint found at '", checkpoint,
                "' (give a checkpoint folder, e.g. out/checkpoints/step_00000200, or a training run's out_dir)");
  TrainedModel m;
  m.dir = *dir;
  const std::string where = str_cat(who, ": checkpoint '", dir->string(), "'");
  // Verified like a resume (checksums, the step of every file), without the optimizer state.
  Checkpoint ck = load_checkpoint_model(*dir);
  const nlohmann::json& state = ck.state;
  TRIREME_CHECK(state.contains("config") && state["config"].is_string() && state.contains("tokenizer"), where,
                ": state.json has no config or tokenizer");
  if (state.value("task", std::string()) == "classify")
    throw io::ConfigError(str_cat(where, ": is a sequence classifier's checkpoint (finetune.task = \"classify\"), "
                                  "whose head predicts labels, not tokens; give the checkpoint of a language model"));
  m.step = ck.step;
  // Config::parse validates every key (ranges and sizes) before anything is allocated.
  try {
    m.config = io::Config::parse(state["config"].get<std::string>(), dir->string() + "/state.json").resolve();
  } catch (const io::ConfigError& e) {
    throw io::ConfigError(str_cat(where, ": its config is not valid: ", e.what()));
  }
  m.tokenizer = io::tokenizer_from_json(state["tokenizer"]);
  const models::GPTConfig gc = gpt_config(m.config, m.tokenizer->vocab_size());
  gc.validate();
  if (memory_check) check_inference_memory(gc, device);
  NamedTensors weights = std::move(ck.model);
  if (!models::lora_tensors(weights).empty()) {
    // A LoRA run's checkpoint: its adapters folded into the weights (models/lora.h).
    const double scale = m.config.lora.rank > 0 ? m.config.lora.alpha / double(m.config.lora.rank) : 1.0;
    const auto merged = models::merge_lora({weights.begin(), weights.end()}, scale, where);
    weights.assign(merged.begin(), merged.end());
  }
  m.model = std::make_unique<models::GPT>(gc, 0);
  try {
    m.model->load_state_dict(weights);
  } catch (const Error& e) {
    TRIREME_FAIL(where, ": model.safetensors does not fit the model its config describes: ", e.what());
  }
  if (!device.is_cpu()) m.model->to(device);
  m.model->eval();
  return m;
}

}  // namespace trireme::train
