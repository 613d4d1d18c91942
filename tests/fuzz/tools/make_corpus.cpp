// Writes the harnesses' seed corpora (tests/fuzz/corpus/<harness>/): small valid inputs made by
// the library itself, so a format change is followed by running this again:
//   build-fuzz/tests/fuzz/fuzz_make_corpus tests/fuzz/corpus
// The store seeds are the bytes real StoreClients send, recorded through a loopback relay, so
// they follow the store's wire format whatever it is.
#include <poll.h>
#include <unistd.h>
#include <sys/socket.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint_files.h"
#include "store_token.h"
#include "trireme/core/tensor.h"
#include "trireme/dist/socket.h"
#include "trireme/dist/store.h"
#include "trireme/io/config.h"
#include "trireme/io/safetensors.h"
#include "trireme/io/token_shard.h"
#include "trireme/io/tokenizer.h"
#include "trireme/train/checkpoint.h"

using namespace trireme;
namespace fs = std::filesystem;
using std::chrono::milliseconds;

namespace {

fs::path g_out;

void write_seed(const std::string& harness, const std::string& name, std::string_view bytes) {
  fs::create_directories(g_out / harness);
  std::ofstream f(g_out / harness / name, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + (g_out / harness / name).string());
}

std::string read_bytes(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A tensor whose bytes count up from `start` (the library's filling ops need its kernels).
Tensor counting(const Shape& sizes, DType dtype, int start = 1) {
  Tensor t = Tensor::empty(sizes, dtype);
  auto* p = static_cast<unsigned char*>(t.data_ptr());
  const size_t n = size_t(t.numel()) * t.element_size();
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(start + i);
  if (dtype == DType::boolean)
    for (size_t i = 0; i < n; ++i) p[i] &= 1;
  return t;
}

void safetensors_seeds() {
  write_seed("safetensors", "f32_2x3_metadata", io::serialize_safetensors(
      {{"weight", counting({2, 3}, DType::f32)}}, {{"step", "10"}, {"format", "pt"}}));
  write_seed("safetensors", "mixed_dtypes", io::serialize_safetensors(
      {{"a.bf16", counting({4}, DType::bf16)}, {"b.f16", counting({2, 2}, DType::f16)},
       {"c.i64", counting({3}, DType::i64)}, {"d.i32", counting({1, 1, 2}, DType::i32)},
       {"e.bool", counting({5}, DType::boolean)}, {"f.f64", counting({}, DType::f64)}}));
  write_seed("safetensors", "empty_tensor", io::serialize_safetensors({{"none", counting({0, 4}, DType::f32)}}));
  write_seed("safetensors", "no_tensors", io::serialize_safetensors({}));
}

void checkpoint_seeds() {
  const fs::path root = fs::temp_directory_path() / ("trireme-make-corpus-" + std::to_string(::getpid()));
  fs::remove_all(root);
  train::Checkpoint ckpt;
  ckpt.step = 1;  // the harness loads its folder as step_00000001
  ckpt.model = {{"wte", counting({4, 2}, DType::f32)}, {"ln.bias", counting({2}, DType::f32, 7)}};
  ckpt.optimizer = {{"wte.exp_avg", counting({4, 2}, DType::f32, 3)}, {"step", counting({}, DType::i64)}};
  ckpt.state = {{"rng", "12345"}, {"data_position", 96}, {"config", io::Config().to_toml().substr(0, 200)}};
  const fs::path dir = train::save_checkpoint(root, ckpt);
  std::string packed;
  for (std::string_view name : fuzz::kCheckpointFiles) {
    if (!fs::exists(dir / name)) break;
    if (!packed.empty() || name != fuzz::kCheckpointFiles[0]) packed += fuzz::kCheckpointFileSeparator;
    packed += read_bytes(dir / name);
  }
  write_seed("checkpoint", "one_process", packed);

  // A distributed checkpoint's layout: no optimizer.safetensors, one file per rank.
  nlohmann::json state = nlohmann::json::parse(read_bytes(dir / "state.json"));
  state["world_size"] = 2;
  const std::string sep(fuzz::kCheckpointFileSeparator);
  write_seed("checkpoint", "two_ranks",
             state.dump(2) + sep + read_bytes(dir / "model.safetensors") + sep + sep +
                 io::serialize_safetensors({{"wte.exp_avg", counting({2, 2}, DType::f32)}}) + sep +
                 io::serialize_safetensors({{"wte.exp_avg", counting({2, 2}, DType::f32, 9)}}));
  fs::remove_all(root);
}

void token_shard_seeds() {
  write_seed("token_shard", "u16", io::serialize_token_shard(std::vector<int32_t>{0, 5, 9, 3, 9}, 10));
  write_seed("token_shard", "u32", io::serialize_token_shard(std::vector<int32_t>{70000, 1, 65536}, 70001));
  write_seed("token_shard", "empty", io::serialize_token_shard(std::vector<int32_t>{}, 2));
}

void config_seeds(const fs::path& source_dir) {
  write_seed("config", "defaults", io::Config().to_toml());
  for (const auto& entry : fs::directory_iterator(source_dir / "configs"))
    if (entry.path().extension() == ".toml") write_seed("config", entry.path().filename().string(), read_bytes(entry.path()));
  write_seed("config", "small_with_overrides",
             std::string("[model]\nd_model = 64\nn_head = 4\n\n[optim]\nlr = 1e-3\nname = \"sgd\"\n\n"
                         "[data]\ncorpus = [\"tang\", \"poems/\"]\n") +
                 '\0' + "train.steps=20\nparallel.dp=2\ntrain.out_dir=runs/a b\ndata.corpus=[\"x.txt\"]");
}

void tokenizer_seeds() {
  const std::string text = "床前明月光，疑是地上霜。\n举头望明月，低头思故乡。\nthe moon, the frost 123\n";
  const std::string sample = std::string("明月 the frost\n\xff\xfe 456");
  write_seed("tokenizer", "char", io::train_tokenizer("char", text)->to_json().dump(1) + '\0' + sample);
  write_seed("tokenizer", "bpe", io::train_tokenizer("bpe", text, 300)->to_json().dump(1) + '\0' + sample);
}

// The real chat templates of the renderer's fixtures (Qwen2, Qwen2.5 with tools, Llama-2/3,
// Mistral, a feature tour), one with a conversation after the NUL.
void chat_template_seeds(const fs::path& source_dir) {
  const auto cases = nlohmann::json::parse(read_bytes(source_dir / "tests/fixtures/chat_templates/cases.json"));
  for (const auto& [name, text] : cases["templates"].items()) write_seed("chat_template", name, text.get<std::string>());
  write_seed("chat_template", "qwen2_with_messages",
             cases["templates"]["qwen2"].get<std::string>() + '\0' + cases["conversations"].begin().value().dump());
}

// Accepts one connection on `listener`, relays it to the server at `port`, and returns what the
// client sent.
std::string relay_once(const dist::Socket& listener, int port) {
  dist::Socket client(::accept(listener.fd(), nullptr, nullptr));
  dist::Socket server = dist::socket_connect("127.0.0.1", port, dist::deadline_after(milliseconds(5000)));
  std::string sent;
  bool client_open = true;
  while (true) {
    pollfd fds[2] = {{client.fd(), POLLIN, 0}, {server.fd(), POLLIN, 0}};
    if (::poll(fds, 2, 5000) <= 0) break;
    char buf[4096];
    if (client_open && fds[0].revents) {
      ssize_t n = ::recv(client.fd(), buf, sizeof buf, 0);
      if (n <= 0) {
        client_open = false;
        ::shutdown(server.fd(), SHUT_WR);
        break;
      }
      sent.append(buf, size_t(n));
      dist::socket_send_all(server, buf, size_t(n), dist::deadline_after(milliseconds(5000)), "relay");
    }
    if (fds[1].revents) {
      ssize_t n = ::recv(server.fd(), buf, sizeof buf, 0);
      if (n <= 0) break;
      dist::socket_send_all(client, buf, size_t(n), dist::deadline_after(milliseconds(5000)), "relay");
    }
  }
  return sent;
}

template <typename Session>
void record_store_seed(const std::string& name, const std::string& token, Session session) {
  dist::StoreServer server({.host = "127.0.0.1", .port = 0, .token = std::string(fuzz::kStoreFuzzToken)});
  dist::Socket listener = dist::socket_listen("127.0.0.1", 0);
  std::string sent;
  std::thread relay([&] { sent = relay_once(listener, server.port()); });
  try {
    dist::StoreClient client({.host = "127.0.0.1", .port = dist::socket_local_port(listener), .token = token,
                              .rank = 1, .timeout = milliseconds(2000)});
    session(client);
  } catch (const Error&) {
    // The refused handshake's seed: the client's bytes are what matters.
  }
  relay.join();
  write_seed("store", name, sent);
}

void store_seeds() {
  const std::string token(fuzz::kStoreFuzzToken);
  record_store_seed("set_get_add", token, [](dist::StoreClient& c) {
    c.set("rank_0_addr", "127.0.0.1:29500");
    c.get("rank_0_addr", milliseconds(10));
    c.add("arrived", 1);
    c.add("arrived", -3);
  });
  record_store_seed("cas_check_remove", token, [](dist::StoreClient& c) {
    c.compare_set("leader", "", "0");
    c.compare_set("leader", "0", "1");
    c.check({"leader", "other"});
    c.remove("leader");
    c.num_keys();
    c.dead_ranks();
  });
  record_store_seed("wait_timeout", token, [](dist::StoreClient& c) {
    c.set("a", "1");
    c.wait({"a"}, milliseconds(10));
    try {
      c.wait({"a", "never"}, milliseconds(1));
    } catch (const dist::StoreTimeout&) {
    }
  });
  record_store_seed("wrong_token", std::string(token.size(), 'x'), [](dist::StoreClient&) {});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_make_corpus OUT_DIR (tests/fuzz/corpus)\n";
    return 2;
  }
  g_out = argv[1];
  safetensors_seeds();
  checkpoint_seeds();
  token_shard_seeds();
  config_seeds(TRIREME_SOURCE_DIR);
  tokenizer_seeds();
  chat_template_seeds(TRIREME_SOURCE_DIR);
  store_seeds();
  std::cout << "seeds written under " << g_out.string() << "\n";
  return 0;
}
