// safetensors round trip and rejection of malformed files.
#include <gtest/gtest.h>

#include "trireme/io/safetensors.h"
#include "trireme/ops/elementwise.h"

using namespace trireme;
using namespace trireme::io;

namespace {
std::string expect_error(const std::string& bytes) {
  try {
    parse_safetensors(bytes, "test.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

std::string with_header(const std::string& json, const std::string& data) {
  std::string out;
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out.push_back(char((n >> (8 * i)) & 0xff));
  return out + json + data;
}
}  // namespace

TEST(Safetensors, RoundTripKeepsValuesDtypesAndMetadata) {
  Generator g(1);
  Tensor a = randn({3, 4}, g);
  Tensor b = from_vector<int64_t>({1, 2, 3}, {3});
  Tensor c = to_dtype(randn({5}, g), DType::bf16);
  auto file = parse_safetensors(serialize_safetensors({{"a", a}, {"b", b}, {"c", c}}, {{"step", "7"}}));
  EXPECT_EQ(file.order, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(file.metadata.at("step"), "7");
  EXPECT_EQ(file.tensors.at("a").to_vector<float>(), a.to_vector<float>());
  EXPECT_EQ(file.tensors.at("b").to_vector<int64_t>(), b.to_vector<int64_t>());
  EXPECT_EQ(file.tensors.at("c").dtype(), DType::bf16);
  EXPECT_EQ(file.tensors.at("c").to_vector<float>(), c.to_vector<float>());
}

TEST(Safetensors, RejectsMalformedFiles) {
  EXPECT_NE(expect_error("abc").find("shorter than the 8-byte header length"), std::string::npos);
  std::string huge(8, '\0');
  huge[7] = char(0x7f);
  EXPECT_NE(expect_error(huge).find("over the limit"), std::string::npos);
  EXPECT_NE(expect_error(with_header("{\"a\":1", "")).find("not valid JSON"), std::string::npos);
  const std::string f32x2 = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_NE(expect_error(with_header(f32x2, "1234")).find("out of bounds"), std::string::npos);
  const std::string wrong_len = R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})";
  EXPECT_NE(expect_error(with_header(wrong_len, "12345678")).find("do not match"), std::string::npos);
  const std::string overlap = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  EXPECT_NE(expect_error(with_header(overlap, "12345678")).find("overlaps"), std::string::npos);
  const std::string hole = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  EXPECT_NE(expect_error(with_header(hole, "12345678")).find("hole"), std::string::npos);
  const std::string trailing = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  EXPECT_NE(expect_error(with_header(trailing, "12345678")).find("belong to no tensor"), std::string::npos);
  const std::string bad_dtype = R"({"a":{"dtype":"F8","shape":[1],"data_offsets":[0,1]}})";
  EXPECT_NE(expect_error(with_header(bad_dtype, "1")).find("unsupported dtype 'F8'"), std::string::npos);
}
