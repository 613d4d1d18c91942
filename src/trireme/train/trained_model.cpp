// Loading a checkpoint's model for inference (see trained_model.h).
#include "trireme/train/trained_model.h"

#include "trireme/core/error.h"
#include "trireme/cuda/device.h"
#include "trireme/io/file_write.h"
#include "trireme/io/safetensors.h"
#include "trireme/train/checkpoint.h"
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

TrainedModel load_trained_model(const std::string& checkpoint, Device device, const std::string& who) {
  check_device(device, who);
  auto dir = find_latest_checkpoint(checkpoint);
  TRIREME_CHECK(dir.has_value(), who, ": no checkpoint found at '", checkpoint,
                "' (give a checkpoint folder, e.g. out/checkpoints/step_00000200, or a training run's out_dir)");
  TrainedModel m;
  m.dir = *dir;
  const std::string where = str_cat(who, ": checkpoint '", dir->string(), "'");
  for (const char* f : {"state.json", "model.safetensors"}) {
    TRIREME_CHECK(fs::is_regular_file(*dir / f), where, " is incomplete: ", f, " is missing");
  }
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(io::read_file(*dir / "state.json"));
  } catch (const nlohmann::json::exception& e) {
    TRIREME_FAIL(where, ": state.json is not valid JSON (", e.what(), ")");
  }
  TRIREME_CHECK(state.is_object() && state.value("format", "") == "trireme-checkpoint-1", where,
                ": state.json is not a trireme checkpoint state");
  TRIREME_CHECK(state.contains("config") && state["config"].is_string() && state.contains("tokenizer"), where,
                ": state.json has no config or tokenizer");
  if (state.contains("step") && state["step"].is_number_integer()) m.step = state["step"].get<int64_t>();
  // Config::parse validates every key (ranges and sizes) before anything is allocated.
  try {
    m.config = io::Config::parse(state["config"].get<std::string>(), dir->string() + "/state.json").resolve();
  } catch (const io::ConfigError& e) {
    throw io::ConfigError(str_cat(where, ": its config is not valid: ", e.what()));
  }
  m.tokenizer = io::tokenizer_from_json(state["tokenizer"]);
  const models::GPTConfig gc = gpt_config(m.config, m.tokenizer->vocab_size());
  gc.validate();
  io::SafetensorsFile file = io::load_safetensors((*dir / "model.safetensors").string());
  NamedTensors weights;
  for (const std::string& n : file.order) weights.emplace_back(n, file.tensors.at(n));
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
