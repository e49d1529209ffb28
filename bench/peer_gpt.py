#!/usr/bin/python3
"""The PyTorch eager peer of strata's GPT training step, for side-by-side throughput.

Same model as src/strata/model/gpt.cpp (pre-norm blocks, fused QKV weight ((H+2K)*D, C) with
no linear biases, causal attention as matmul / masked_fill(-inf) / softmax / matmul, GELU
(tanh) or SwiGLU with a fused up-projection (gate rows first), LayerNorm with bias or RMSNorm,
tied or untied head, learned or rotary positions, mean cross-entropy), and the same step as
src/strata/train/trainer.cpp (zero grads in place, forward/backward, grad norm in float64,
clip to 1.0, warmup-cosine learning rate, AdamW). No torch.compile. Run it with Debian's
python3-torch (/usr/bin/python3), which wraps the same libtorch 1.13 that strata links.

Prints one JSON line: median tokens/s and step time over the measured steps (the first
--warmup-steps are dropped), plus what was run.
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--n-layers", type=int, default=6)
    p.add_argument("--n-heads", type=int, default=12)
    p.add_argument("--n-kv-heads", type=int, default=0, help="0 = n_heads")
    p.add_argument("--d-ff", type=int, default=0, help="0 = 4 * d_model")
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--pos", choices=["learned", "rope"], default="learned")
    p.add_argument("--norm", choices=["layernorm", "rmsnorm"], default="layernorm")
    p.add_argument("--activation", choices=["gelu", "swiglu"], default="gelu")
    p.add_argument("--untied", action="store_true", help="separate output head")
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=5, help="optimizer steps, warm-up included")
    p.add_argument("--warmup-steps", type=int, default=2, help="steps left out of the timing")
    p.add_argument("--lr-warmup", type=int, default=10, help="train.warmup_steps (learning rate)")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--foreach", action="store_true",
                   help="AdamW foreach=True (default False: one tensor at a time, as strata)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--autocast", choices=["none", "bf16"], default="none",
                   help="bf16: forward under torch.autocast('cpu', bfloat16), the usual PyTorch "
                        "mixed precision (fp32 parameters, gradients and AdamW)")
    p.add_argument("--profile", action="store_true",
                   help="print torch.profiler's op table for the last step to stderr (that step is "
                        "then timed with the profiler's overhead)")
    args = p.parse_args()
    if args.steps <= args.warmup_steps:
        p.error(f"--steps ({args.steps}) must exceed --warmup-steps ({args.warmup_steps})")
    if args.d_model % args.n_heads:
        p.error(f"--n-heads ({args.n_heads}) must divide --d-model ({args.d_model})")
    return args


# strata's defaults (src/strata/core/config.h): TrainConfig and ModelConfig.
LR, MIN_LR = 3e-4, 3e-5
WEIGHT_DECAY, BETAS, EPS, GRAD_CLIP = 0.1, (0.9, 0.95), 1e-8, 1.0
INIT_STD, NORM_EPS, ROPE_THETA = 0.02, 1e-5, 10000.0


class GPT(torch.nn.Module):
    """Parameters in the same shapes and order as strata's GPT; forward in the same ops."""

    def __init__(self, a):
        super().__init__()
        C, V, T, H = a.d_model, a.vocab, a.seq_len, a.n_heads
        K = a.n_kv_heads or H
        D, F = C // H, a.d_ff or 4 * C
        self.C, self.V, self.H, self.K, self.D, self.F = C, V, H, K, D, F
        self.layernorm, self.swiglu, self.rope = a.norm == "layernorm", a.activation == "swiglu", a.pos == "rope"
        residual_std = INIT_STD / math.sqrt(2.0 * a.n_layers)
        self.decay, self.no_decay = [], []

        def add(shape, kind, std=0.0, decay=True):
            if kind == "normal":
                value = torch.empty(shape).normal_(0.0, std)
            else:
                value = torch.ones(shape) if kind == "ones" else torch.zeros(shape)
            parameter = torch.nn.Parameter(value)
            (self.decay if decay else self.no_decay).append(parameter)
            return parameter

        self.token_embedding = add((V, C), "normal", INIT_STD)  # (V, C)
        self.position_embedding = None if self.rope else add((T, C), "normal", INIT_STD)  # (T, C)
        self.blocks = []
        for _ in range(a.n_layers):
            block = {
                "norm1_weight": add((C,), "ones", decay=False),
                "norm1_bias": add((C,), "zeros", decay=False) if self.layernorm else None,
                "q": add((H * D, C), "normal", INIT_STD),
                "kv": add((2 * K * D, C), "normal", INIT_STD),
                "attn_out": add((C, H * D), "normal", residual_std),
                "norm2_weight": add((C,), "ones", decay=False),
                "norm2_bias": add((C,), "zeros", decay=False) if self.layernorm else None,
                "fc": add((2 * F if self.swiglu else F, C), "normal", INIT_STD),
                "fc_out": add((C, F), "normal", residual_std),
            }
            self.blocks.append(block)
        self.final_norm_weight = add((C,), "ones", decay=False)
        self.final_norm_bias = add((C,), "zeros", decay=False) if self.layernorm else None
        self.head = self.token_embedding if not a.untied else add((V, C), "normal", INIT_STD)
        if self.rope:
            inverse_frequency = ROPE_THETA ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
            angles = torch.outer(torch.arange(T, dtype=torch.float64), inverse_frequency)
            self.rope_cos, self.rope_sin = angles.cos().float(), angles.sin().float()  # (T, D/2)
        self.mask = torch.ones(T, T, dtype=torch.bool).triu(1)  # (T, T) true = hidden

    def parameter_count(self):
        return sum(p.numel() for p in self.decay + self.no_decay)

    def norm(self, x, weight, bias):
        if bias is not None:
            return torch.layer_norm(x, (self.C,), weight, bias, NORM_EPS)
        scale = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + NORM_EPS)
        return x * scale * weight

    def rotate(self, x):
        T, half = x.size(2), x.size(3) // 2
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        x1, x2 = x.narrow(-1, 0, half), x.narrow(-1, half, half)
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)

    def attention(self, x, block):
        B, T = x.shape[:2]
        H, K, D = self.H, self.K, self.D
        q = torch.matmul(x, block["q"].t()).view(B, T, H, D).transpose(1, 2)
        kv = torch.matmul(x, block["kv"].t())  # (B, T, 2K * D): keys, then values
        k = kv.narrow(-1, 0, K * D).view(B, T, K, D).transpose(1, 2)
        v = kv.narrow(-1, K * D, K * D).view(B, T, K, D).transpose(1, 2)
        if self.rope:
            q, k = self.rotate(q), self.rotate(k)
        if K != H:
            k, v = k.repeat_interleave(H // K, 1), v.repeat_interleave(H // K, 1)
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
        scores = scores.masked_fill(self.mask[:T, :T], float("-inf"))
        y = torch.matmul(torch.softmax(scores, -1), v)  # (B, H, T, D)
        y = y.transpose(1, 2).reshape(B, T, H * D)
        return torch.matmul(y, block["attn_out"].t())

    def mlp(self, x, block):
        h = torch.matmul(x, block["fc"].t())
        if self.swiglu:
            h = torch.nn.functional.silu(h.narrow(-1, 0, self.F)) * h.narrow(-1, self.F, self.F)
        else:
            h = torch.nn.functional.gelu(h, approximate="tanh")
        return torch.matmul(h, block["fc_out"].t())

    def loss(self, tokens, targets):
        T = tokens.size(1)
        x = torch.embedding(self.token_embedding, tokens)  # (B, T, C)
        if self.position_embedding is not None:
            x = x + self.position_embedding.narrow(0, 0, T)
        for block in self.blocks:
            x = x + self.attention(self.norm(x, block["norm1_weight"], block["norm1_bias"]), block)
            x = x + self.mlp(self.norm(x, block["norm2_weight"], block["norm2_bias"]), block)
        x = self.norm(x, self.final_norm_weight, self.final_norm_bias)
        logits = torch.matmul(x, self.head.t())  # (B, T, V)
        return torch.nn.functional.cross_entropy(logits.view(-1, self.V), targets.reshape(-1))


def learning_rate(step, steps, warmup):
    """strata's warmup-then-cosine schedule (src/strata/optim/adamw.cpp)."""
    if step < warmup:
        return LR * (step + 1) / warmup
    decay_steps = steps - warmup
    if decay_steps <= 1:
        return LR
    progress = min(1.0, (step - warmup) / (decay_steps - 1))
    return MIN_LR + (LR - MIN_LR) * 0.5 * (1.0 + math.cos(math.pi * progress))


def main():
    a = parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = GPT(a)
    parameters = model.decay + model.no_decay
    optimizer = torch.optim.AdamW(
        [{"params": model.decay, "weight_decay": WEIGHT_DECAY},
         {"params": model.no_decay, "weight_decay": 0.0}],
        lr=LR, betas=BETAS, eps=EPS, foreach=a.foreach)
    for p in parameters:  # strata zeroes existing grads in place; start with them allocated
        p.grad = torch.zeros_like(p)

    microbatches = 1  # micro_batch = global batch on one rank
    step_times, losses = [], []
    profiler = None
    for step in range(a.steps):
        if a.profile and step == a.steps - 1:
            profiler = torch.profiler.profile()
            profiler.__enter__()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=False)
        rows = torch.randint(0, a.vocab, (a.micro_batch, a.seq_len + 1))
        loss_sum = torch.zeros(1, dtype=torch.float64)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast == "bf16"):
            loss = model.loss(rows.narrow(1, 0, a.seq_len), rows.narrow(1, 1, a.seq_len))
        (loss / float(microbatches)).backward()
        loss_sum += loss.detach().to(torch.float64)
        mean_loss = (loss_sum / microbatches).item()
        with torch.no_grad():  # strata's clip_gradients: norm in float64, scale if above 1.0
            sum_squares = torch.zeros((), dtype=torch.float64)
            for p in parameters:
                sum_squares += p.grad.to(torch.float64).pow(2).sum()
            norm = math.sqrt(sum_squares.item())
            if norm > GRAD_CLIP:
                for p in parameters:
                    p.grad.mul_(GRAD_CLIP / (norm + 1e-6))
        lr = learning_rate(step, a.steps, a.lr_warmup)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()
        step_times.append(time.perf_counter() - start)
        losses.append(mean_loss)
    if profiler is not None:
        profiler.__exit__(None, None, None)
        table = profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
        print(table, file=sys.stderr)

    measured = step_times[a.warmup_steps:]
    tokens_per_step = a.micro_batch * a.seq_len
    step_time = statistics.median(measured)
    print(json.dumps({
        "system": "pytorch-eager",
        "torch": torch.__version__,
        "tokens_per_s": statistics.median(tokens_per_step / t for t in measured),
        "step_time_s": step_time,
        "step_times_s": step_times,
        "steps_measured": len(measured),
        "tokens_per_step": tokens_per_step,
        "parameters": model.parameter_count(),
        "first_loss": losses[0],
        "threads": torch.get_num_threads(),
        "adamw_foreach": a.foreach,
        "autocast": a.autocast,
    }))


if __name__ == "__main__":
    main()
