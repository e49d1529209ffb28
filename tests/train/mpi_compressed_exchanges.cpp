// The compressed exchanges of compression.* on the real MPI transport, below the trainer:
// int8 block quantization's error bound, sign packing, the 1-bit all-reduce (its error
// feedback over 1,000 calls, its bytes) and PowerSGD (exact on low-rank averages, error
// feedback on the rest).
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "strata/data_parallel/onebit_allreduce.h"
#include "strata/data_parallel/powersgd.h"
#include "strata/data_parallel/quantize.h"
#include "strata/dist/comm.h"

namespace strata {
namespace {

at::Tensor random_tensor(std::vector<int64_t> shape, uint64_t seed, at::ScalarType dtype) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::normal(0.0, 1.0, shape, generator, at::TensorOptions(dtype));
}

double max_abs(const at::Tensor& t) { return t.numel() == 0 ? 0.0 : t.abs().max().item<double>(); }

TEST(Quantize, Int8ErrorIsAtMostAHalfStepOfItsBlock) {
  for (const int64_t numel : {0, 1, 255, 256, 257, 1000}) {
    // Blocks of very different magnitudes: each has its own scale.
    at::Tensor x = random_tensor({numel}, 7 + numel, at::kFloat);
    if (numel > 0) x.mul_(at::pow(10.0, at::arange(numel, at::kFloat).div(256).floor().sub(2)));
    at::Tensor values = at::empty({numel}, at::kChar);
    at::Tensor scales = at::empty({quant_blocks(numel)}, at::kFloat);
    quantize_int8(x, values, scales);
    at::Tensor decoded = at::empty({numel}, at::kFloat);
    dequantize_int8(values, scales, decoded);
    for (int64_t b = 0; b < quant_blocks(numel); ++b) {
      const int64_t start = b * kQuantBlock, length = std::min(kQuantBlock, numel - start);
      const at::Tensor block = x.narrow(0, start, length);
      const double absmax = block.abs().max().item<double>();
      const double error = (decoded.narrow(0, start, length) - block).abs().max().item<double>();
      // Half a step of 127 steps per absmax, plus float32 rounding of the product.
      EXPECT_LE(error, absmax / 254 * (1 + 1e-5) + 1e-30)
          << "numel " << numel << " block " << b << " absmax " << absmax;
      EXPECT_EQ(values.narrow(0, start, length).abs().max().item<int64_t>(), 127)
          << "the block's largest value uses the whole range; numel " << numel << " block " << b;
    }
  }
}

// Two rows of eight: each row's scale is its mean |x|, its signs a byte (most significant bit
// first, 0 counts as +), and the row is left with what compression dropped.
TEST(Quantize, SignsEncodeEightToAByteWithARowScale) {
  const at::Tensor x = at::tensor({-1.0, 2.0, 0.0, -0.5, 3.0, 3.0, -3.0, 1.5,  //
                                   1.0, 1.0, 1.0, 1.0, -1.0, -1.0, -1.0, -1.0},
                                  at::kDouble);
  at::Tensor rows = x.clone().view({2, 8});
  at::Tensor scales = at::empty({2}, at::kFloat);
  at::Tensor signs = at::empty({2}, at::kByte);
  encode_signs(rows, scales, signs);
  EXPECT_EQ(signs[0].item<int64_t>(), 0b01101101);
  EXPECT_EQ(signs[1].item<int64_t>(), 0b11110000);
  EXPECT_EQ(scales[0].item<float>(), 14.0f / 8);
  EXPECT_EQ(scales[1].item<float>(), 1.0f);
  const at::Tensor sign = at::where(x.ge(0), 1.0, -1.0).to(at::kDouble).view({2, 8});
  const at::Tensor compressed = sign * scales.to(at::kDouble).unsqueeze(1);
  EXPECT_TRUE(at::allclose(rows, x.view({2, 8}) - compressed, 0, 1e-15));
  at::Tensor decoded = at::empty({2, 8}, at::kDouble);
  decode_signs(signs, scales, 1.0, /*sum=*/false, decoded);
  EXPECT_TRUE(at::equal(decoded, compressed));
  at::Tensor summed = at::ones({1, 8}, at::kDouble);
  decode_signs(signs, scales, 0.5, /*sum=*/true, summed);
  EXPECT_TRUE(at::allclose(summed, 1 + 0.5 * compressed.sum(0, true), 0, 1e-15));
  // Summed into two rows, four input rows (two workers' chunks of two blocks each) add up by
  // position: input row r into row r % 2.
  at::Tensor twice = at::cat({x, 2 * x}).view({4, 8});
  at::Tensor twice_scales = at::empty({4}, at::kFloat);
  at::Tensor twice_signs = at::empty({4}, at::kByte);
  encode_signs(twice, twice_scales, twice_signs);
  at::Tensor by_block = at::zeros({2, 8}, at::kDouble);
  decode_signs(twice_signs, twice_scales, 0.5, /*sum=*/true, by_block);
  EXPECT_TRUE(at::allclose(by_block, 1.5 * compressed, 0, 1e-15));
}

// Every rank's input of call t, known to every rank, so the true average needs no message.
at::Tensor input_of(int64_t call, int rank, int64_t numel) {
  return random_tensor({numel}, 1000003 * call + rank, at::kDouble);
}

// Summed over the calls, the results differ from the true averages by exactly what the errors
// hold now (the average worker error and the server error, with zero errors at the start);
// the errors stay bounded, not growing with the number of calls; every rank gets the same
// result; the bytes are 2 (n-1) (chunk / 8 + 4 chunk / kSignBlock): the signs and a float32
// scale per block (none for an empty tensor).
TEST(OneBitAllReduce, ErrorFeedbackKeepsTheResidualBoundedOver1000Calls) {
  Comm world = Comm::world(120);
  const int n = world.size();
  for (const int64_t numel : {0, 1, 999, 5000}) {
    OneBitAllReduce exchange(world, numel, at::kDouble);
    const int64_t padded = exchange.worker_error().numel(), chunk = padded / n;
    EXPECT_EQ(padded % (kSignBlock * n), 0);
    at::Tensor result_sum = at::zeros({numel}, at::kDouble);
    at::Tensor true_sum = at::zeros({numel}, at::kDouble);
    double first_half_max = 0, second_half_max = 0;
    const int64_t calls = 1000;
    for (int64_t t = 0; t < calls; ++t) {
      at::Tensor x = input_of(t, world.rank(), numel);
      at::Tensor mean = at::zeros({numel}, at::kDouble);
      for (int r = 0; r < n; ++r) mean += input_of(t, r, numel);
      mean.div_(n);
      CompressedTraffic traffic;
      exchange.all_reduce(x, &traffic);
      const int64_t bytes = traffic.sent[static_cast<size_t>(CommKind::AllToAll)] +
                            traffic.sent[static_cast<size_t>(CommKind::AllGather)];
      ASSERT_EQ(bytes, numel == 0 ? 0 : 2 * (n - 1) * (chunk / 8 + 4 * chunk / kSignBlock))
          << "numel " << numel << " call " << t;
      result_sum += x;
      true_sum += mean;
      const double rms = numel == 0 ? 0.0
                                    : exchange.worker_error().norm().item<double>() /
                                          std::sqrt(static_cast<double>(padded));
      (t < calls / 2 ? first_half_max : second_half_max) =
          std::max(t < calls / 2 ? first_half_max : second_half_max, rms);
    }
    // The inputs have unit variance: the residual stays of that order (a residual that
    // accumulated would walk to ~sqrt(1000) = 32), and no larger late. Below a block of values
    // the padding's errors move together and the late maximum is one noisy draw: the relative
    // check needs several independent blocks.
    if (world.rank() == 0) {
      std::printf("n %d numel %ld: worker error rms, max of calls 0-499 %.3f, 500-999 %.3f\n", n,
                  static_cast<long>(numel), first_half_max, second_half_max);
    }
    EXPECT_LE(std::max(first_half_max, second_half_max), 1.5) << "numel " << numel;
    if (numel >= 2 * kSignBlock) {
      EXPECT_LE(second_half_max, 1.2 * first_half_max) << "numel " << numel;
    }
    at::Tensor worker_mean = exchange.worker_error().clone();
    world.all_reduce(worker_mean, ReduceOp::Avg);
    at::Tensor server = at::empty({padded}, at::kDouble);
    world.all_gather(server, exchange.server_error());
    const at::Tensor held = (worker_mean + server).narrow(0, 0, numel);
    EXPECT_LE(max_abs(result_sum - true_sum + held), 1e-8 * calls) << "numel " << numel;
    at::Tensor spread = result_sum.clone();
    world.all_reduce(spread, ReduceOp::Max);
    EXPECT_TRUE(at::equal(spread, result_sum)) << "every rank has the same results";
  }
}

// A one-parameter-per-matrix bucket over the world, as FlatBuckets lays one out.
struct TestBucket {
  std::vector<Parameter> parameters;
  Bucket bucket;
  TestBucket(Comm& group, const std::vector<std::vector<int64_t>>& shapes) {
    parameters.reserve(shapes.size());
    for (size_t i = 0; i < shapes.size(); ++i) {
      Parameter parameter;
      parameter.name = "p" + std::to_string(i);
      parameter.value = at::zeros(shapes[i], at::kDouble);
      parameters.push_back(parameter);
    }
    bucket.group = &group;
    for (Parameter& parameter : parameters) {
      bucket.parameters.push_back(&parameter);
      bucket.offsets.push_back(bucket.numel);
      bucket.numel += parameter.value.numel();
    }
    bucket.grads = at::zeros({bucket.numel}, at::kDouble);
  }
  at::Tensor grad(size_t i) {
    return bucket.grads.narrow(0, bucket.offsets[i], parameters[i].value.numel())
        .view(parameters[i].value.sizes());
  }
};

TEST(PowerSgd, CompressesOnlyWhereItPays) {
  EXPECT_TRUE(powersgd_compresses({64, 64}, 4));   // 2 * 128 * 4 < 4096
  EXPECT_FALSE(powersgd_compresses({16, 16}, 4));  // 2 * 32 * 4 = 256, not < 256
  EXPECT_TRUE(powersgd_compresses({16, 17}, 4));   // 264 < 272
  EXPECT_FALSE(powersgd_compresses({4096}, 1));    // 1-D
  EXPECT_TRUE(powersgd_compresses({8, 4, 4}, 1));  // 8 x 16: 48 < 128
}

// The average of rank-r gradients lies in a rank-r space PowerSGD finds from any start: the
// first call returns it exactly and leaves no residual. The uncompressed 1-D and small
// gradients are averaged exactly.
TEST(PowerSgd, ALowRankAverageIsExactAndTheSmallTensorsTravelWhole) {
  Comm world = Comm::world(120);
  const int n = world.size();
  const int64_t rank = 2;
  TestBucket test(world, {{40, 24}, {24}, {6, 6}, {10, 8, 5}});
  PowerSgd powersgd(test.bucket, rank);
  // Each rank's matrix: a multiple of the same two outer products; 1-D: rank-specific.
  const at::Tensor u = random_tensor({40, rank}, 1, at::kDouble);
  const at::Tensor v = random_tensor({24, rank}, 2, at::kDouble);
  const double weight = 1.0 + world.rank();
  test.grad(0).copy_(at::mm(u, v.t()) * weight);
  test.grad(1).copy_(random_tensor({24}, 10 + world.rank(), at::kDouble));
  test.grad(2).copy_(random_tensor({6, 6}, 20 + world.rank(), at::kDouble));
  const at::Tensor w = at::mm(u.narrow(0, 0, 10), random_tensor({rank, 40}, 3, at::kDouble));
  test.grad(3).copy_(w.view({10, 8, 5}) * weight);
  const at::Tensor expected_matrix = at::mm(u, v.t()) * ((n + 1) / 2.0);
  at::Tensor expected_1d = at::zeros({24}, at::kDouble),
             expected_small = at::zeros({6, 6}, at::kDouble);
  for (int r = 0; r < n; ++r) {
    expected_1d += random_tensor({24}, 10 + r, at::kDouble) / n;
    expected_small += random_tensor({6, 6}, 20 + r, at::kDouble) / n;
  }
  CompressedTraffic traffic;
  powersgd.start(traffic);
  powersgd.finish(traffic);
  EXPECT_LE((test.grad(0) - expected_matrix).abs().max().item<double>(), 1e-10);
  EXPECT_LE((test.grad(1) - expected_1d).abs().max().item<double>(), 1e-12);
  EXPECT_LE((test.grad(2) - expected_small).abs().max().item<double>(), 1e-12);
  // The 10 x 40 matrix is compressed (2 * 50 * 2 < 400) and of rank 2: exact too.
  EXPECT_LE((test.grad(3) - w.view({10, 8, 5}) * ((n + 1) / 2.0)).abs().max().item<double>(),
            1e-10);
  EXPECT_EQ(powersgd.q_elements(), (24 + 40) * rank);
  EXPECT_EQ(powersgd.p_elements(), (40 + 10) * rank + 24 + 36);
  // Two all-reduces of the factors and the small tensors, nothing else.
  const int64_t sent = traffic.sent[static_cast<size_t>(CommKind::AllReduce)];
  EXPECT_EQ(sent, all_reduce_bytes(powersgd.p_elements(), 8, n, world.rank()) +
                      all_reduce_bytes(powersgd.q_elements(), 8, n, world.rank()));
}

// A full-rank average is not representable at rank 1; error feedback carries what is left
// into later calls, so over many calls of the same gradients the results' mean approaches the
// true average (the residual stays bounded while the sum grows).
TEST(PowerSgd, ErrorFeedbackRecoversAFullRankAverageOverCalls) {
  Comm world = Comm::world(120);
  const int n = world.size();
  TestBucket test(world, {{12, 10}});
  PowerSgd powersgd(test.bucket, 1);
  at::Tensor expected = at::zeros({12, 10}, at::kDouble);
  for (int r = 0; r < n; ++r) expected += random_tensor({12, 10}, 40 + r, at::kDouble) / n;
  at::Tensor sum = at::zeros({12, 10}, at::kDouble);
  const int calls = 400;
  double first_error = 0;
  for (int t = 0; t < calls; ++t) {
    test.grad(0).copy_(random_tensor({12, 10}, 40 + world.rank(), at::kDouble));
    CompressedTraffic traffic;
    powersgd.start(traffic);
    powersgd.finish(traffic);
    if (t == 0) first_error = (test.grad(0) - expected).norm().item<double>();
    sum += test.grad(0);
  }
  const double mean_error = (sum / calls - expected).norm().item<double>();
  EXPECT_GT(first_error, 0.1 * expected.norm().item<double>()) << "rank 1 cannot hold it at once";
  EXPECT_LE(mean_error, 0.02 * expected.norm().item<double>());
}

}  // namespace
}  // namespace strata
