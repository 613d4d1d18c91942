// A tokenizer file of arbitrary bytes, then (after a NUL byte) a text of arbitrary bytes:
// load_tokenizer refuses the file with trireme::Error or loads it; then encode never throws and
// gives ids inside the vocabulary, BPE's decode gives the text back exactly (tokenizer_bpe.h),
// token_to_string is valid UTF-8, decode refuses ids outside the vocabulary with trireme::Error,
// and to_json() loads back to a tokenizer that encodes the same.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "trireme/core/error.h"
#include "trireme/io/tokenizer.h"
#include "trireme/io/utf8.h"

using namespace trireme;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [file, text] = fuzz::split_at_nul({reinterpret_cast<const char*>(data), size});
  const auto path = fuzz::temp_dir() / "tokenizer.json";
  fuzz::write_bytes(path, file);
  std::unique_ptr<io::Tokenizer> tok;
  try {
    tok = io::load_tokenizer(path.string());
  } catch (const Error&) {
    return 0;
  }
  const int64_t vocab = tok->vocab_size();
  FUZZ_REQUIRE(vocab > 0, "a loaded tokenizer has a vocabulary");

  const std::vector<int32_t> ids = tok->encode(text);
  for (int32_t id : ids) FUZZ_REQUIRE(id >= 0 && id < vocab, "encode gives ids inside the vocabulary");
  const std::string back = tok->decode(ids);
  if (tok->type() == "bpe") FUZZ_REQUIRE(back == text, "BPE round trip is exact for every byte string");

  // Ids from the text's bytes, some of them outside the vocabulary.
  std::vector<int32_t> raw(text.size() / 4);
  if (!raw.empty()) std::memcpy(raw.data(), text.data(), raw.size() * 4);
  for (int32_t id : raw) {
    if (id >= 0 && id < vocab) {
      FUZZ_REQUIRE(io::utf8_is_valid(tok->token_to_string(id)), "token_to_string is valid UTF-8");
    }
  }
  const bool all_inside = std::all_of(raw.begin(), raw.end(), [&](int32_t id) { return id >= 0 && id < vocab; });
  try {
    tok->decode(raw);
    FUZZ_REQUIRE(all_inside, "decode refuses ids outside the vocabulary");
  } catch (const Error&) {
    FUZZ_REQUIRE(!all_inside, "decode takes every id inside the vocabulary");
  }

  const std::unique_ptr<io::Tokenizer> again = io::tokenizer_from_json(tok->to_json());
  FUZZ_REQUIRE(again->vocab_size() == vocab && again->encode(text) == ids, "to_json() loads back to the same tokenizer");
  return 0;
}
