// A GPT whose sizes overflow the parameter count is refused by validate(), before any weight
// is allocated or filled.
#include <gtest/gtest.h>

#include "trireme/models/gpt.h"

using namespace trireme;

TEST(GPTSize, OverflowingSizesAreAnErrorBeforeAllocating) {
  models::GPTConfig c{.vocab_size = 100, .block_size = 8, .n_layer = 1, .n_head = 1, .d_model = 1623261534117349};
  try {
    models::GPT model(c, 0);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GPTConfig: the parameter count of d_model = 1623261534117349"),
              std::string::npos) << e.what();
  }
  c = {.vocab_size = int64_t(1) << 40, .block_size = 8, .n_layer = 1, .n_head = 1, .d_model = int64_t(1) << 24};
  EXPECT_THROW(c.validate(), Error);  // vocab x d_model
  c = {.vocab_size = 100, .block_size = 8, .n_layer = 3, .n_head = 2, .d_model = 16};
  EXPECT_NO_THROW(c.validate());
  EXPECT_GT(c.num_parameters(), 0);
}
