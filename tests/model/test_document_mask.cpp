// Packed documents (data.document_mask) in the GPT: a row packed from several documents gives
// each document the logits it gets alone (positions restarting at its start), and the packed
// loss's gradients are the documents' own, for learned and rotary positions, both attention
// kernels and activation recomputation, in float64.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "strata/core/error.h"
#include "strata/model/gpt.h"
#include "test_configs.h"

namespace strata {
namespace {

struct Variant {
  PositionEncoding pos;
  AttentionKernel attention;
  Recompute recompute;
};

std::string variant_name(const ::testing::TestParamInfo<Variant>& info) {
  return str(name_of(info.param.pos), "_", name_of(info.param.attention), "_",
             name_of(info.param.recompute));
}

constexpr int64_t kSeqLen = 24;

// Document lengths of the two packed rows: one of several documents (one of a single token),
// one of two.
const std::vector<std::vector<int64_t>> kRows = {{7, 1, 10, 6}, {13, 11}};

// (rows, T) int64: each token's document id, the offset where its document begins.
at::Tensor document_ids() {
  std::vector<at::Tensor> rows;
  for (const auto& lengths : kRows) {
    std::vector<int64_t> ids;
    for (int64_t length : lengths) {
      const auto start = static_cast<int64_t>(ids.size());
      ids.insert(ids.end(), static_cast<size_t>(length), start);
    }
    rows.push_back(at::tensor(ids, at::kLong));
  }
  return at::stack(rows);
}

class DocumentMask : public ::testing::TestWithParam<Variant> {
 protected:
  GPT model() const {
    ModelConfig config = testing::gpt_config(19, 16, 2, 4, kSeqLen);
    config.n_kv_heads = 2;
    config.pos = GetParam().pos;
    config.attention = GetParam().attention;
    config.init_std = 0.3;
    GPT gpt(config, 5, at::kDouble);
    gpt.set_recompute(GetParam().recompute);
    return gpt;
  }
};

TEST_P(DocumentMask, EachDocumentGetsItsOwnLogits) {
  GPT gpt = model();
  at::manual_seed(3);
  const at::Tensor tokens = at::randint(19, {2, kSeqLen}, at::kLong);
  const at::Tensor packed = gpt.logits(tokens, nullptr, document_ids());
  for (size_t b = 0; b < kRows.size(); ++b) {
    int64_t start = 0;
    for (int64_t length : kRows[b]) {
      const at::Tensor alone =
          gpt.logits(tokens[static_cast<int64_t>(b)].narrow(0, start, length).unsqueeze(0))[0];
      const at::Tensor in_row = packed[static_cast<int64_t>(b)].narrow(0, start, length);
      EXPECT_TRUE(at::allclose(in_row, alone, 1e-10, 1e-10))
          << "row " << b << ", document at " << start << ": max difference "
          << (in_row - alone).abs().max().item<double>();
      start += length;
    }
  }
  // Without the mask the later documents see the earlier ones: the test can tell.
  EXPECT_FALSE(at::allclose(gpt.logits(tokens), packed, 1e-6, 1e-6));
}

// The packed loss is the mean over all tokens, so its gradient is the sum over documents of
// each document's mean loss weighted by its share of the tokens.
TEST_P(DocumentMask, PackedGradientsAreTheDocumentsOwn) {
  GPT packed_model = model(), alone_model = model();
  at::manual_seed(4);
  const at::Tensor tokens = at::randint(19, {2, kSeqLen}, at::kLong);
  const at::Tensor targets = at::randint(19, {2, kSeqLen}, at::kLong);
  const at::Tensor packed_loss = packed_model.loss(tokens, targets, document_ids());
  packed_loss.backward();
  const double all_tokens = static_cast<double>(tokens.numel());
  at::Tensor summed = at::zeros({}, at::kDouble);
  for (size_t b = 0; b < kRows.size(); ++b) {
    int64_t start = 0;
    const auto row = static_cast<int64_t>(b);
    for (int64_t length : kRows[b]) {
      const at::Tensor loss = alone_model.loss(tokens[row].narrow(0, start, length).unsqueeze(0),
                                               targets[row].narrow(0, start, length).unsqueeze(0));
      (loss * (static_cast<double>(length) / all_tokens)).backward();
      summed += loss.detach() * (static_cast<double>(length) / all_tokens);
      start += length;
    }
  }
  EXPECT_NEAR(packed_loss.item<double>(), summed.item<double>(), 1e-12);
  for (size_t i = 0; i < packed_model.parameters().size(); ++i) {
    const Parameter& packed = packed_model.parameters()[i];
    const at::Tensor& alone = alone_model.parameters()[i].value.grad();
    EXPECT_TRUE(at::allclose(packed.value.grad(), alone, 1e-10, 1e-12))
        << packed.name << ": max difference "
        << (packed.value.grad() - alone).abs().max().item<double>();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Variants, DocumentMask,
    ::testing::Values(
        Variant{PositionEncoding::learned, AttentionKernel::blockwise, Recompute::none},
        Variant{PositionEncoding::rope, AttentionKernel::blockwise, Recompute::none},
        Variant{PositionEncoding::learned, AttentionKernel::eager, Recompute::none},
        Variant{PositionEncoding::rope, AttentionKernel::eager, Recompute::none},
        Variant{PositionEncoding::rope, AttentionKernel::eager, Recompute::selective},
        Variant{PositionEncoding::learned, AttentionKernel::blockwise, Recompute::full}),
    variant_name);

TEST(DocumentMaskModel, RejectsDocumentsWithACache) {
  GPT gpt(testing::gpt_config(19, 16, 1, 4, kSeqLen), 5, at::kDouble);
  KVCache cache;
  EXPECT_ANY_THROW(gpt.logits(at::zeros({2, kSeqLen}, at::kLong), &cache, document_ids()));
}

}  // namespace
}  // namespace strata
