// parse_token_shard on arbitrary bytes: refused with trireme::Error, or every token is inside
// the vocabulary it declares and the shard serializes and parses back to the same tokens.
#include <cstdint>
#include <string_view>

#include "fuzz_support.h"
#include "trireme/core/error.h"
#include "trireme/io/token_shard.h"

using namespace trireme;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  io::TokenShard shard;
  try {
    shard = io::parse_token_shard(bytes, "fuzz.bin");
  } catch (const Error&) {
    return 0;
  }
  FUZZ_REQUIRE(shard.dtype_bytes == 2 || shard.dtype_bytes == 4, "dtype is u16 or u32");
  FUZZ_REQUIRE(size == io::kTokenShardHeaderBytes + shard.tokens.size() * shard.dtype_bytes,
               "the tokens fill the file exactly");
  for (int32_t t : shard.tokens) FUZZ_REQUIRE(t >= 0 && t < shard.vocab_size, "tokens are inside the vocabulary");
  const io::TokenShard again = io::parse_token_shard(io::serialize_token_shard(shard.tokens, shard.vocab_size));
  FUZZ_REQUIRE(again.tokens == shard.tokens && again.vocab_size == shard.vocab_size, "round trip keeps the tokens");
  return 0;
}
