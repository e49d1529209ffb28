#!/usr/bin/python3
"""PyTorch DistributedDataParallel (gloo) peer of strata's data-parallel step.

The model and the step are bench/peer_gpt.py's (strata's GPT and trainer in PyTorch eager);
here N processes each run one microbatch of --micro-batch sequences per step, with DDP
averaging the gradients over gloo in 25 MB buckets overlapped with backward (DDP's default,
as strata's parallel.bucket_mb = 25). Run it with Debian's python3-torch (/usr/bin/python3),
the libtorch strata links.

Prints one JSON line (from rank 0): step times, median step time and tokens/s of the whole
job, and what was run.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_gpt  # noqa: E402  (the model, strata's constants and schedule)


class RegisteredGPT(peer_gpt.GPT):
    """peer_gpt.GPT with every parameter registered (DDP finds them) and a forward."""

    def __init__(self, a):
        super().__init__(a)
        for index, parameter in enumerate(self.decay + self.no_decay):
            self.register_parameter(f"p{index}", parameter)

    def forward(self, tokens, targets):
        return self.loss(tokens, targets)


def worker(rank, a, port, results):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=a.nproc)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)  # the same initial model on every rank (DDP also broadcasts)
    model = RegisteredGPT(a)
    parameters = model.decay + model.no_decay
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(
        [{"params": model.decay, "weight_decay": peer_gpt.WEIGHT_DECAY},
         {"params": model.no_decay, "weight_decay": 0.0}],
        lr=peer_gpt.LR, betas=peer_gpt.BETAS, eps=peer_gpt.EPS, foreach=False)
    generator = torch.Generator().manual_seed(a.seed * 1000 + rank)
    step_times = []
    for step in range(a.steps):
        dist.barrier()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=False)
        rows = torch.randint(0, a.vocab, (a.micro_batch, a.seq_len + 1), generator=generator)
        loss = ddp(rows.narrow(1, 0, a.seq_len), rows.narrow(1, 1, a.seq_len))
        loss.backward()  # DDP all-reduces (averages) the gradient buckets during backward
        mean_loss = loss.detach().to(torch.float64)
        dist.all_reduce(mean_loss)
        with torch.no_grad():  # strata's clip: norm in float64, scale if above 1.0
            sum_squares = torch.zeros((), dtype=torch.float64)
            for p in parameters:
                sum_squares += p.grad.to(torch.float64).pow(2).sum()
            norm = math.sqrt(sum_squares.item())
            if norm > peer_gpt.GRAD_CLIP:
                for p in parameters:
                    p.grad.mul_(peer_gpt.GRAD_CLIP / (norm + 1e-6))
        for group in optimizer.param_groups:
            group["lr"] = peer_gpt.learning_rate(step, a.steps, a.lr_warmup)
        optimizer.step()
        step_times.append(time.perf_counter() - start)
    if rank == 0:
        measured = step_times[a.warmup_steps:]
        tokens_per_step = a.nproc * a.micro_batch * a.seq_len
        results.put({
            "system": "pytorch-ddp-gloo",
            "torch": torch.__version__,
            "ranks": a.nproc,
            "threads": a.threads,
            "step_time_s": statistics.median(measured),
            "tokens_per_s": statistics.median(tokens_per_step / t for t in measured),
            "step_times_s": step_times,
            "tokens_per_step": tokens_per_step,
            "parameters": model.parameter_count(),
        })
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name, default in (("d-model", 256), ("n-layers", 4), ("n-heads", 4), ("seq-len", 128),
                          ("vocab", 256), ("micro-batch", 4), ("steps", 8), ("warmup-steps", 2),
                          ("lr-warmup", 2), ("threads", 1), ("nproc", 2), ("seed", 1234),
                          ("port", 29517)):
        p.add_argument("--" + name, type=int, default=default)
    a = p.parse_args()
    # peer_gpt.GPT reads these fields; the benchmark model is its default kind.
    a.n_kv_heads, a.d_ff, a.pos, a.norm, a.activation, a.untied = 0, 0, "learned", "layernorm", "gelu", False
    context = mp.get_context("spawn")
    results = context.SimpleQueue()
    mp.start_processes(worker, args=(a, a.port, results), nprocs=a.nproc, start_method="spawn")
    print(json.dumps(results.get()))


if __name__ == "__main__":
    main()
