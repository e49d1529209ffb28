#!/usr/bin/env python3
"""Small random Hugging Face models, and an independent fp32 reference of their forward pass.

The tests of strata's Hugging Face loader (issue 32) write tiny random models in the exact
layout `save_pretrained` gives, load them into strata, and compare strata's logits with the
logits this script computes. Only python3 and Debian's python3-torch are needed: there is no
`transformers` and no `safetensors` package here, so both formats are written and read below.
The forward pass follows the semantics of transformers' modeling code for each architecture
(GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM, MixtralForCausalLM),
written from the math, not copied.

Formats
  config.json        the fields the modeling code reads, under their real names, plus
                     `architectures`, `model_type` and `torch_dtype`, as save_pretrained writes.
  *.safetensors      8-byte little-endian header length N, N bytes of JSON
                     {name: {"dtype": "F32"|"BF16"|"F16"|"BOOL"|"U8", "shape": [...],
                     "data_offsets": [begin, end]}, "__metadata__": {"format": "pt"}} padded with
                     spaces to a multiple of 8, then the raw little-endian row-major data.
  sharded            model-0000i-of-0000N.safetensors and model.safetensors.index.json
                     {"metadata": {"total_size": bytes}, "weight_map": {name: file}}.

Commands (the C++ tests call them exactly so)
  hf_models.py make --arch ARCH --out DIR [--seed S] [--dtype f32|bf16|f16] [--shards N]
                    [--variant V]...
      ARCH: gpt2, llama, qwen2, mistral, mixtral. Variants (several may be given):
        gpt2     no-prefix (names without `transformer.`), no-lm-head (tied head omitted),
                 mask-buffers (h.N.attn.bias and h.N.attn.masked_bias present)
        llama    gqa, llama3-rope, head-dim, untied (default tied), attention-bias, mlp-bias,
                 inv-freq-buffers (self_attn.rotary_emb.inv_freq, as older checkpoints carry),
                 rope-yarn (a rope type strata refuses)
        qwen2    tied (default untied), sliding-window
        mistral  head-dim, sliding-window
        mixtral  sliding-window
        any      unknown-arch (architectures ["FooForCausalLM"])
      The same (arch, seed, dtype, variants) always writes the same bytes.
  hf_models.py logits --model DIR --ids 1,2,3 --out FILE.safetensors
      The reference logits in fp32 on the CPU as tensor `logits`: (T, vocab) for one sequence,
      (B, T, vocab) for several of equal length separated by `;` (--ids "1,2,3;4,5,6").
  hf_models.py generate --model DIR --ids 1,2,3 --max-new-tokens N
      Greedy decoding (argmax each step, the whole forward recomputed each step, no stop at
      end-of-text); prints {"prompt_ids": [...], "generated_ids": [...], "logprobs": [...]}
      where a logprob is log_softmax of that step's logits at the chosen id.
  hf_models.py self-test
      Checks this script against known facts; prints each check; exits nonzero on a failure.
"""

import argparse
import json
import math
import os
import struct
import sys
import tempfile

import torch

# ---------------------------------------------------------------------------------------------
# safetensors

DTYPE_CODES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16",
               torch.bool: "BOOL", torch.uint8: "U8"}
DTYPES_BY_CODE = {code: dtype for dtype, code in DTYPE_CODES.items()}
DTYPES_BY_NAME = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
TORCH_DTYPE_FIELD = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def tensor_bytes(tensor):
    tensor = tensor.contiguous()
    if tensor.dtype == torch.bfloat16:  # numpy has no bfloat16: the same 2 bytes as int16
        tensor = tensor.view(torch.int16)
    return tensor.numpy().tobytes()


def write_safetensors(path, tensors):
    """tensors: an ordered dict name -> tensor; written in that order."""
    header = {}
    blobs = []
    offset = 0
    for name, tensor in tensors.items():
        blob = tensor_bytes(tensor)
        header[name] = {"dtype": DTYPE_CODES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    header["__metadata__"] = {"format": "pt"}
    header_json = json.dumps(header, separators=(",", ":")).encode()
    header_json += b" " * (-len(header_json) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(header_json)))
        out.write(header_json)
        for blob in blobs:
            out.write(blob)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (header_length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_length])
    body = data[8 + header_length:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        dtype = DTYPES_BY_CODE[entry["dtype"]]
        shape = entry["shape"]
        if begin == end:
            tensors[name] = torch.zeros(shape, dtype=dtype)
        else:
            tensors[name] = torch.frombuffer(bytearray(body[begin:end]), dtype=dtype).reshape(shape)
    return tensors


def read_model_tensors(model_dir):
    """All tensors of a model directory: model.safetensors, or the shards its index names."""
    index_path = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index_path):
        with open(index_path) as f:
            weight_map = json.load(f)["weight_map"]
        tensors = {}
        for shard in sorted(set(weight_map.values())):
            tensors.update(read_safetensors(os.path.join(model_dir, shard)))
        if set(tensors) != set(weight_map):
            raise ValueError(f"{model_dir}: the shards' tensors differ from the index's weight_map")
        return tensors
    return read_safetensors(os.path.join(model_dir, "model.safetensors"))


def write_model(out_dir, config, tensors, shards):
    """config.json plus the tensors in one file, or in `shards` files with an index."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    if shards == 1:
        write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors)
        return
    names = list(tensors)
    if shards > len(names):
        raise ValueError(f"--shards {shards} is more than the model's {len(names)} tensors")
    weight_map = {}
    for shard in range(shards):
        file_name = f"model-{shard + 1:05d}-of-{shards:05d}.safetensors"
        part = names[shard * len(names) // shards:(shard + 1) * len(names) // shards]
        write_safetensors(os.path.join(out_dir, file_name), {name: tensors[name] for name in part})
        weight_map.update({name: file_name for name in part})
    total_size = sum(tensor.numel() * tensor.element_size() for tensor in tensors.values())
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total_size}, "weight_map": dict(sorted(weight_map.items()))},
                  f, indent=2)
        f.write("\n")

# ---------------------------------------------------------------------------------------------
# The generator: configs as save_pretrained writes them, random weights under HF's names.

VARIANTS = {
    "gpt2": {"no-prefix", "no-lm-head", "mask-buffers", "unknown-arch"},
    "llama": {"gqa", "llama3-rope", "head-dim", "untied", "attention-bias", "mlp-bias", "inv-freq-buffers",
              "rope-yarn", "unknown-arch"},
    "qwen2": {"tied", "sliding-window", "unknown-arch"},
    "mistral": {"head-dim", "sliding-window", "unknown-arch"},
    "mixtral": {"sliding-window", "unknown-arch"},
}
ARCHITECTURES = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                 "mistral": "MistralForCausalLM", "mixtral": "MixtralForCausalLM"}
TRANSFORMERS_VERSION = "4.46.3"


class WeightMaker:
    """Draws every tensor from one seeded generator, in the order they are asked for."""

    def __init__(self, seed, dtype):
        self.generator = torch.Generator().manual_seed(seed)
        self.dtype = dtype

    def normal(self, shape, std, mean=0.0):
        values = torch.randn(shape, generator=self.generator, dtype=torch.float32) * std + mean
        return values.to(self.dtype)


def gpt2_config(dtype):
    return {
        "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
        "bos_token_id": 95, "embd_pdrop": 0.1, "eos_token_id": 95, "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 128, "n_embd": 64, "n_head": 4,
        "n_inner": None, "n_layer": 2, "n_positions": 128, "reorder_and_upcast_attn": False,
        "resid_pdrop": 0.1, "scale_attn_by_inverse_layer_idx": False, "scale_attn_weights": True,
        "summary_activation": None, "summary_first_dropout": 0.1, "summary_proj_to_labels": True,
        "summary_type": "cls_index", "summary_use_proj": True, "torch_dtype": TORCH_DTYPE_FIELD[dtype],
        "transformers_version": TRANSFORMERS_VERSION, "use_cache": True, "vocab_size": 96,
    }


def gpt2_tensors(config, variants, maker):
    C, P, V = config["n_embd"], config["n_positions"], config["vocab_size"]
    inner = config["n_inner"] or 4 * C
    prefix = "" if "no-prefix" in variants else "transformer."
    tensors = {prefix + "wte.weight": maker.normal((V, C), 0.2),
               prefix + "wpe.weight": maker.normal((P, C), 0.05)}
    for layer in range(config["n_layer"]):
        block = f"{prefix}h.{layer}."
        tensors[block + "ln_1.weight"] = maker.normal((C,), 0.1, 1.0)
        tensors[block + "ln_1.bias"] = maker.normal((C,), 0.05)
        if "mask-buffers" in variants:  # as older checkpoints (the canonical gpt2 one) carry them
            tensors[block + "attn.bias"] = torch.tril(torch.ones(P, P)).view(1, 1, P, P).to(maker.dtype)
            tensors[block + "attn.masked_bias"] = torch.tensor(-1e4).to(maker.dtype)
        # Conv1D stores its weight as (in, out); c_attn's out is [Q | K | V].
        tensors[block + "attn.c_attn.weight"] = maker.normal((C, 3 * C), 0.08)
        tensors[block + "attn.c_attn.bias"] = maker.normal((3 * C,), 0.05)
        tensors[block + "attn.c_proj.weight"] = maker.normal((C, C), 0.08)
        tensors[block + "attn.c_proj.bias"] = maker.normal((C,), 0.05)
        tensors[block + "ln_2.weight"] = maker.normal((C,), 0.1, 1.0)
        tensors[block + "ln_2.bias"] = maker.normal((C,), 0.05)
        tensors[block + "mlp.c_fc.weight"] = maker.normal((C, inner), 0.08)
        tensors[block + "mlp.c_fc.bias"] = maker.normal((inner,), 0.05)
        tensors[block + "mlp.c_proj.weight"] = maker.normal((inner, C), 0.08)
        tensors[block + "mlp.c_proj.bias"] = maker.normal((C,), 0.05)
    tensors[prefix + "ln_f.weight"] = maker.normal((C,), 0.1, 1.0)
    tensors[prefix + "ln_f.bias"] = maker.normal((C,), 0.05)
    if "no-lm-head" not in variants:
        tensors["lm_head.weight"] = tensors[prefix + "wte.weight"].clone()
    return tensors


def llama_family_config(arch, variants, dtype):
    """The fields of LlamaConfig / Qwen2Config / MistralConfig / MixtralConfig that a small model
    sets; the defaults of each class that its modeling code reads are written as well."""
    config = {
        "architectures": [ARCHITECTURES[arch]], "model_type": arch, "attention_dropout": 0.0,
        "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 64,
        "initializer_range": 0.02, "intermediate_size": 176, "max_position_embeddings": 128,
        "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 10000.0,
        "tie_word_embeddings": False, "torch_dtype": TORCH_DTYPE_FIELD[dtype],
        "transformers_version": TRANSFORMERS_VERSION, "use_cache": True, "vocab_size": 112,
    }
    if arch == "llama":
        config.update({"attention_bias": "attention-bias" in variants, "head_dim": 16,
                       "mlp_bias": "mlp-bias" in variants, "num_hidden_layers": 3,
                       "num_key_value_heads": 2 if "gqa" in variants else 4, "pretraining_tp": 1,
                       "rms_norm_eps": 1e-05, "tie_word_embeddings": "untied" not in variants,
                       "vocab_size": 128})
        if "head-dim" in variants:
            config["head_dim"] = 32
        if "llama3-rope" in variants:
            # head_dim 16 and theta 5e5 give wavelengths 6.3, 32.5, 167, ...: with 64 original
            # positions the first is high-frequency (< 16), the second medium, the rest low (> 64).
            config.update({"rope_theta": 500000.0, "bos_token_id": 0, "eos_token_id": 3,
                           "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                            "original_max_position_embeddings": 64, "rope_type": "llama3"}})
        if "rope-yarn" in variants:
            config["rope_scaling"] = {"factor": 4.0, "original_max_position_embeddings": 32,
                                      "rope_type": "yarn"}
    elif arch == "qwen2":
        # Qwen2's hub configs carry a sliding_window that use_sliding_window=false switches off.
        config.update({"max_window_layers": 2, "rope_theta": 1000000.0, "sliding_window": 128,
                       "tie_word_embeddings": "tied" in variants, "use_sliding_window": False,
                       "bos_token_id": 0, "eos_token_id": 1, "vocab_size": 104})
        if "sliding-window" in variants:
            config.update({"use_sliding_window": True, "sliding_window": 8, "max_window_layers": 1})
    elif arch == "mistral":
        config.update({"head_dim": 32 if "head-dim" in variants else None, "rope_theta": 1000000.0,
                       "sliding_window": 8 if "sliding-window" in variants else None})
    elif arch == "mixtral":
        config.update({"head_dim": None, "intermediate_size": 128, "num_experts_per_tok": 2,
                       "num_local_experts": 4, "output_router_logits": False, "rope_theta": 1000000.0,
                       "router_aux_loss_coef": 0.001, "router_jitter_noise": 0.0,
                       "sliding_window": 8 if "sliding-window" in variants else None, "vocab_size": 96})
    return config


def llama_family_tensors(config, variants, maker):
    C, V, I = config["hidden_size"], config["vocab_size"], config["intermediate_size"]
    H, KV = config["num_attention_heads"], config["num_key_value_heads"]
    D = config.get("head_dim") or C // H
    attention_bias = config.get("attention_bias", False) or config["model_type"] == "qwen2"
    mlp_bias = config.get("mlp_bias", False)

    def linear(tensors, name, out_features, in_features, bias):
        tensors[name + ".weight"] = maker.normal((out_features, in_features), 0.08)
        if bias:
            tensors[name + ".bias"] = maker.normal((out_features,), 0.05)

    tensors = {"model.embed_tokens.weight": maker.normal((V, C), 0.2)}
    for layer in range(config["num_hidden_layers"]):
        block = f"model.layers.{layer}."
        tensors[block + "input_layernorm.weight"] = maker.normal((C,), 0.1, 1.0)
        linear(tensors, block + "self_attn.q_proj", H * D, C, attention_bias)
        linear(tensors, block + "self_attn.k_proj", KV * D, C, attention_bias)
        linear(tensors, block + "self_attn.v_proj", KV * D, C, attention_bias)
        linear(tensors, block + "self_attn.o_proj", C, H * D, config.get("attention_bias", False))
        if "inv-freq-buffers" in variants:
            exponents = torch.arange(0, D, 2).to(torch.float32) / D
            tensors[block + "self_attn.rotary_emb.inv_freq"] = 1.0 / config["rope_theta"] ** exponents
        tensors[block + "post_attention_layernorm.weight"] = maker.normal((C,), 0.1, 1.0)
        if config["model_type"] == "mixtral":
            moe = block + "block_sparse_moe."
            tensors[moe + "gate.weight"] = maker.normal((config["num_local_experts"], C), 0.2)
            for expert in range(config["num_local_experts"]):
                linear(tensors, f"{moe}experts.{expert}.w1", I, C, False)
                linear(tensors, f"{moe}experts.{expert}.w2", C, I, False)
                linear(tensors, f"{moe}experts.{expert}.w3", I, C, False)
        else:
            linear(tensors, block + "mlp.gate_proj", I, C, mlp_bias)
            linear(tensors, block + "mlp.up_proj", I, C, mlp_bias)
            linear(tensors, block + "mlp.down_proj", C, I, mlp_bias)
    tensors["model.norm.weight"] = maker.normal((C,), 0.1, 1.0)
    if not config["tie_word_embeddings"]:  # save_pretrained drops a tied head
        tensors["lm_head.weight"] = maker.normal((V, C), 0.2)
    return tensors


def make_model(arch, out_dir, seed=0, dtype=torch.float32, shards=1, variants=()):
    variants = set(variants)
    unknown = variants - VARIANTS[arch]
    if unknown:
        raise ValueError(f"unknown variant(s) {sorted(unknown)} for {arch}; known: {sorted(VARIANTS[arch])}")
    maker = WeightMaker(seed, dtype)
    if arch == "gpt2":
        config = gpt2_config(dtype)
        tensors = gpt2_tensors(config, variants, maker)
    else:
        config = llama_family_config(arch, variants, dtype)
        tensors = llama_family_tensors(config, variants, maker)
    if "unknown-arch" in variants:
        config.update({"architectures": ["FooForCausalLM"], "model_type": "foo"})
    write_model(out_dir, config, tensors, shards)

# ---------------------------------------------------------------------------------------------
# The reference forward pass, in float32 from the stored values.


class Weights:
    """The model's tensors as float32; `take` marks a name used, so that a tensor no code path
    reads (a misnamed or extra weight) fails the reference instead of passing unnoticed."""

    def __init__(self, tensors, ignored_suffixes=()):
        self.tensors = tensors
        self.unused = {name for name in tensors if not name.endswith(tuple(ignored_suffixes))}

    def take(self, name, shape=None):
        if name not in self.tensors:
            raise ValueError(f"the model has no tensor {name}")
        self.unused.discard(name)
        tensor = self.tensors[name].to(torch.float32)
        if shape is not None and list(tensor.shape) != list(shape):
            raise ValueError(f"{name} has shape {list(tensor.shape)}, expected {list(shape)}")
        return tensor

    def check_all_used(self):
        if self.unused:
            raise ValueError(f"tensors the architecture does not use: {sorted(self.unused)}")


def causal_allowed(T, sliding_window=None):
    """(T, T) bool: query i may attend to key j. A sliding window of W keeps the W most recent
    keys, i itself included (j > i - W), as transformers' sliding-window mask does."""
    query = torch.arange(T).view(T, 1)
    key = torch.arange(T).view(1, T)
    allowed = key <= query
    if sliding_window is not None:
        allowed &= key > query - sliding_window
    return allowed


def attention(q, k, v, allowed, scale):
    """q: (B, H, T, D); k, v: (B, KV, T, D) with H a multiple of KV. Query head h reads kv head
    h // (H / KV): each kv head serves H / KV consecutive query heads (transformers' repeat_kv)."""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = (q @ k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def gelu_tanh(x):  # "gelu_new"
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def gpt2_logits(config, tensors, ids):
    B, T = ids.shape
    C, H = config["n_embd"], config["n_head"]
    D = C // H
    if T > config["n_positions"]:
        raise ValueError(f"{T} tokens exceed n_positions {config['n_positions']}")
    if config.get("activation_function", "gelu_new") != "gelu_new":
        raise ValueError(f"activation_function {config['activation_function']} is not gelu_new")
    prefix = "transformer." if "transformer.wte.weight" in tensors else ""
    weights = Weights(tensors, ignored_suffixes=(".attn.bias", ".attn.masked_bias"))
    eps = config["layer_norm_epsilon"]

    def layer_norm(x, name):
        return torch.nn.functional.layer_norm(x, (C,), weights.take(name + ".weight", [C]),
                                              weights.take(name + ".bias", [C]), eps)

    def conv1d(x, name):  # weight (in, out)
        return x @ weights.take(name + ".weight") + weights.take(name + ".bias")

    wte = weights.take(prefix + "wte.weight")
    x = wte[ids] + weights.take(prefix + "wpe.weight")[:T]
    allowed = causal_allowed(T)
    for layer in range(config["n_layer"]):
        block = f"{prefix}h.{layer}."
        qkv = conv1d(layer_norm(x, block + "ln_1"), block + "attn.c_attn")
        q, k, v = (part.view(B, T, H, D).transpose(1, 2) for part in qkv.split(C, dim=-1))
        scale = 1.0 / math.sqrt(D) if config.get("scale_attn_weights", True) else 1.0
        if config.get("scale_attn_by_inverse_layer_idx", False):
            scale /= layer + 1
        heads = attention(q, k, v, allowed, scale).transpose(1, 2).reshape(B, T, C)
        x = x + conv1d(heads, block + "attn.c_proj")
        hidden = gelu_tanh(conv1d(layer_norm(x, block + "ln_2"), block + "mlp.c_fc"))
        x = x + conv1d(hidden, block + "mlp.c_proj")
    x = layer_norm(x, prefix + "ln_f")
    if config.get("tie_word_embeddings", True):
        head = wte
        weights.unused.discard("lm_head.weight")  # a stored copy of the tied head is not read
    else:
        head = weights.take("lm_head.weight")
    weights.check_all_used()
    return x @ head.T


def rope_inverse_frequencies(config, head_dim):
    """(head_dim / 2,) float32: theta^(-2i/d), rescaled per band for rope_type llama3."""
    theta = config.get("rope_theta", 10000.0)
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).to(torch.float32) / head_dim
    inverse = 1.0 / (theta ** exponents)
    scaling = config.get("rope_scaling")
    if scaling is None:
        return inverse
    rope_type = scaling.get("rope_type", scaling.get("type"))
    if rope_type == "default":
        return inverse
    if rope_type != "llama3":
        raise ValueError(f"rope_scaling type {rope_type} is not implemented by the reference")
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    original = scaling["original_max_position_embeddings"]
    wavelength = 2 * math.pi / inverse
    # Wavelengths above original/low (low frequencies) are slowed by `factor`, those below
    # original/high kept; in between, interpolate linearly in original/wavelength.
    smooth = (original / wavelength - low) / (high - low)
    blended = (1 - smooth) * inverse / factor + smooth * inverse
    result = torch.where(wavelength > original / low, inverse / factor, blended)
    return torch.where(wavelength < original / high, inverse, result)


def apply_rope(x, positions, inverse_frequencies):
    """x: (B, heads, T, D). Rotates the pairs (x[i], x[i + D/2]) by angle position * f_i
    (transformers' rotate_half convention, not interleaved pairs)."""
    angles = positions.to(torch.float32).view(-1, 1) * inverse_frequencies.view(1, -1)  # (T, D/2)
    cos, sin = torch.cos(angles), torch.sin(angles)
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    return torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1)


def rms_norm(x, weight, eps):
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def silu_glu(x, gate, up, down):
    return down(torch.nn.functional.silu(gate(x)) * up(x))


def mixtral_moe(x, weights, prefix, config):
    """x: (N, C). Softmax over all experts' router logits, keep the top k, renormalise their
    weights to sum to 1, and add the chosen experts' w2(silu(w1 x) * w3 x); no token dropped."""
    experts, top_k = config["num_local_experts"], config["num_experts_per_tok"]
    C = x.shape[-1]
    I = config["intermediate_size"]
    probabilities = torch.softmax(x @ weights.take(prefix + "gate.weight", [experts, C]).T, dim=-1)
    chosen_probabilities, chosen = probabilities.topk(top_k, dim=-1)
    chosen_probabilities = chosen_probabilities / chosen_probabilities.sum(-1, keepdim=True)
    out = torch.zeros_like(x)
    for expert in range(experts):
        name = f"{prefix}experts.{expert}."
        w1 = weights.take(name + "w1.weight", [I, C])
        w2 = weights.take(name + "w2.weight", [C, I])
        w3 = weights.take(name + "w3.weight", [I, C])
        routed = (chosen == expert).to(torch.float32) * chosen_probabilities  # (N, k)
        token_weight = routed.sum(-1, keepdim=True)  # 0 where the expert was not chosen
        out += token_weight * silu_glu(x, lambda t: t @ w1.T, lambda t: t @ w3.T, lambda t: t @ w2.T)
    return out


def llama_family_logits(config, tensors, ids):
    arch = config["model_type"]
    B, T = ids.shape
    C, H = config["hidden_size"], config["num_attention_heads"]
    KV = config.get("num_key_value_heads") or H
    D = config.get("head_dim") or C // H
    eps = config["rms_norm_eps"]
    if config.get("hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act {config['hidden_act']} is not silu")
    weights = Weights(tensors, ignored_suffixes=(".rotary_emb.inv_freq",))
    # Which projections have a bias: Llama's attention_bias (q, k, v and o) and mlp_bias;
    # Qwen2 always on q, k, v and never elsewhere; Mistral and Mixtral none.
    qkv_bias = config.get("attention_bias", False) or arch == "qwen2"
    output_bias = config.get("attention_bias", False)
    mlp_bias = config.get("mlp_bias", False)

    def linear(x, name, out_features, in_features, bias=False):
        y = x @ weights.take(name + ".weight", [out_features, in_features]).T
        if bias:
            y = y + weights.take(name + ".bias", [out_features])
        return y

    sliding_window = None
    if arch in ("mistral", "mixtral"):
        sliding_window = config.get("sliding_window")
    inverse_frequencies = rope_inverse_frequencies(config, D)
    positions = torch.arange(T)
    embed = weights.take("model.embed_tokens.weight", [config["vocab_size"], C])
    x = embed[ids]
    for layer in range(config["num_hidden_layers"]):
        block = f"model.layers.{layer}."
        window = sliding_window
        if arch == "qwen2" and config.get("use_sliding_window") and layer >= config["max_window_layers"]:
            window = config["sliding_window"]
        allowed = causal_allowed(T, window)
        h = rms_norm(x, weights.take(block + "input_layernorm.weight", [C]), eps)
        q = linear(h, block + "self_attn.q_proj", H * D, C, qkv_bias).view(B, T, H, D).transpose(1, 2)
        k = linear(h, block + "self_attn.k_proj", KV * D, C, qkv_bias).view(B, T, KV, D).transpose(1, 2)
        v = linear(h, block + "self_attn.v_proj", KV * D, C, qkv_bias).view(B, T, KV, D).transpose(1, 2)
        q = apply_rope(q, positions, inverse_frequencies)
        k = apply_rope(k, positions, inverse_frequencies)
        heads = attention(q, k, v, allowed, 1.0 / math.sqrt(D)).transpose(1, 2).reshape(B, T, H * D)
        x = x + linear(heads, block + "self_attn.o_proj", C, H * D, output_bias)
        h = rms_norm(x, weights.take(block + "post_attention_layernorm.weight", [C]), eps)
        if arch == "mixtral":
            moe = mixtral_moe(h.reshape(B * T, C), weights, block + "block_sparse_moe.", config)
            x = x + moe.view(B, T, C)
        else:
            I = config["intermediate_size"]
            x = x + silu_glu(h, lambda t: linear(t, block + "mlp.gate_proj", I, C, mlp_bias),
                             lambda t: linear(t, block + "mlp.up_proj", I, C, mlp_bias),
                             lambda t: linear(t, block + "mlp.down_proj", C, I, mlp_bias))
    x = rms_norm(x, weights.take("model.norm.weight", [C]), eps)
    if config.get("tie_word_embeddings", False):
        head = embed
        weights.unused.discard("lm_head.weight")
    else:
        head = weights.take("lm_head.weight", [config["vocab_size"], C])
    weights.check_all_used()
    return x @ head.T


FORWARDS = {"GPT2LMHeadModel": gpt2_logits, "LlamaForCausalLM": llama_family_logits,
            "Qwen2ForCausalLM": llama_family_logits, "MistralForCausalLM": llama_family_logits,
            "MixtralForCausalLM": llama_family_logits}


def load_model(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    architectures = config.get("architectures") or []
    if len(architectures) != 1 or architectures[0] not in FORWARDS:
        raise ValueError(f"{model_dir}: architectures {architectures} is not one of {sorted(FORWARDS)}")
    return config, read_model_tensors(model_dir)


def reference_logits(config, tensors, ids):
    """ids: (B, T) int64 -> logits (B, T, vocab) float32."""
    vocab = config["vocab_size"]
    if ids.numel() and (ids.min() < 0 or ids.max() >= vocab):
        raise ValueError(f"token ids must lie in [0, {vocab})")
    with torch.no_grad():
        return FORWARDS[config["architectures"][0]](config, tensors, ids)

# ---------------------------------------------------------------------------------------------
# Commands


def parse_ids(text):
    rows = [[int(token) for token in row.split(",")] for row in text.split(";")]
    if len({len(row) for row in rows}) != 1 or not rows[0]:
        raise ValueError(f"--ids {text}: sequences must be non-empty and of equal length")
    return torch.tensor(rows, dtype=torch.int64)


def command_make(args):
    make_model(args.arch, args.out, args.seed, DTYPES_BY_NAME[args.dtype], args.shards, args.variant)


def command_logits(args):
    config, tensors = load_model(args.model)
    ids = parse_ids(args.ids)
    logits = reference_logits(config, tensors, ids)
    if ids.shape[0] == 1 and ";" not in args.ids:
        logits = logits[0]
    write_safetensors(args.out, {"logits": logits.contiguous()})


def greedy_generate(config, tensors, prompt, max_new_tokens):
    ids = list(prompt)
    generated, logprobs = [], []
    for _ in range(max_new_tokens):
        last = reference_logits(config, tensors, torch.tensor([ids]))[0, -1]
        token = int(torch.argmax(last))
        generated.append(token)
        logprobs.append(float(torch.log_softmax(last, dim=-1)[token]))
        ids.append(token)
    return generated, logprobs


def command_generate(args):
    config, tensors = load_model(args.model)
    prompt = parse_ids(args.ids)[0].tolist()
    generated, logprobs = greedy_generate(config, tensors, prompt, args.max_new_tokens)
    print(json.dumps({"prompt_ids": prompt, "generated_ids": generated, "logprobs": logprobs}))


class SelfTest:
    def __init__(self):
        self.failures = 0

    def check(self, ok, what, detail=""):
        print(f"{'ok  ' if ok else 'FAIL'} {what}" + (f": {detail}" if detail and not ok else ""))
        self.failures += 0 if ok else 1

    def close(self, a, b, what, rtol=1e-5, atol=1e-5):
        error = float((a - b).abs().max()) if a.shape == b.shape else float("inf")
        self.check(a.shape == b.shape and torch.allclose(a, b, rtol=rtol, atol=atol), what,
                   f"shapes {list(a.shape)} vs {list(b.shape)}, max |difference| {error:.3g}")


def logits_of(model_dir, ids):
    config, tensors = load_model(model_dir)
    return reference_logits(config, tensors, torch.tensor(ids))


def self_test_formats(test, work):
    tensors = {"a": torch.randn(3, 5), "b": torch.randn(7).to(torch.bfloat16),
               "c": torch.randn(2, 2, 3).to(torch.float16), "d": torch.tril(torch.ones(4, 4)).bool(),
               "e": torch.tensor(-1e4)}
    path = os.path.join(work, "roundtrip.safetensors")
    write_safetensors(path, tensors)
    back = read_safetensors(path)
    test.check(set(back) == set(tensors) and all(
        back[n].dtype == t.dtype and back[n].shape == t.shape and tensor_bytes(back[n]) == tensor_bytes(t)
        for n, t in tensors.items()), "safetensors F32/BF16/F16/BOOL/scalar read back bit-exactly")
    with open(path, "rb") as f:
        (header_length,) = struct.unpack("<Q", f.read(8))
    test.check((8 + header_length) % 8 == 0, "safetensors header padded to a multiple of 8")

    make_model("llama", os.path.join(work, "one"), seed=3, variants=["gqa"])
    make_model("llama", os.path.join(work, "three"), seed=3, shards=3, variants=["gqa"])
    one = read_model_tensors(os.path.join(work, "one"))
    three = read_model_tensors(os.path.join(work, "three"))
    test.check(sorted(os.listdir(os.path.join(work, "three"))) ==
               ["config.json", "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                "model-00003-of-00003.safetensors", "model.safetensors.index.json"],
               "--shards 3 writes three shards and an index")
    test.check(set(one) == set(three) and all(torch.equal(one[n], three[n]) for n in one),
               "sharded model holds the same tensors as the single file")
    make_model("llama", os.path.join(work, "bf16"), seed=3, dtype=torch.bfloat16, variants=["gqa"])
    bf16 = read_model_tensors(os.path.join(work, "bf16"))
    test.check(all(bf16[n].dtype == torch.bfloat16 and torch.equal(bf16[n], one[n].to(torch.bfloat16))
                   for n in one), "--dtype bf16 stores the f32 model's values rounded to bf16")
    with open(os.path.join(work, "bf16", "config.json")) as f:
        test.check(json.load(f)["torch_dtype"] == "bfloat16", "config.json torch_dtype follows --dtype")
    make_model("llama", os.path.join(work, "again"), seed=3, variants=["gqa"])
    with open(os.path.join(work, "one", "model.safetensors"), "rb") as a, \
            open(os.path.join(work, "again", "model.safetensors"), "rb") as b:
        test.check(a.read() == b.read(), "make is deterministic for a given seed")


def self_test_rope(test):
    D = 8
    inverse = rope_inverse_frequencies({"rope_theta": 10000.0}, D)
    test.close(inverse, torch.tensor([1.0, 0.1, 0.01, 0.001]), "default inverse frequencies 10000^(-2i/8)")
    x = torch.randn(1, 1, 3, D)
    rotated = apply_rope(x, torch.arange(3), inverse)
    expected = torch.empty_like(x)
    for t in range(3):
        for i in range(D // 2):
            angle = t * float(inverse[i])
            a, b = float(x[0, 0, t, i]), float(x[0, 0, t, i + D // 2])
            expected[0, 0, t, i] = a * math.cos(angle) - b * math.sin(angle)
            expected[0, 0, t, i + D // 2] = b * math.cos(angle) + a * math.sin(angle)
    test.close(rotated, expected, "RoPE rotates the pairs (x[i], x[i+D/2]) (rotate_half)")
    q, k = torch.randn(1, 1, 1, D), torch.randn(1, 1, 1, D)

    def score(query_position, key_position):
        return float((apply_rope(q, torch.tensor([query_position]), inverse) *
                      apply_rope(k, torch.tensor([key_position]), inverse)).sum())

    test.check(abs(score(7, 5) - score(3, 1)) < 1e-4, "RoPE scores depend on relative position only")

    llama3 = {"rope_theta": 500000.0, "rope_scaling": {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64}}
    # By hand from the formula, in double: wavelengths 6.28 (< 16: kept), 32.4 (medium:
    # ((1 - s) / 8 + s) * f with s = (64 / 32.4 - 1) / 3), then > 64 (f / 8).
    by_hand = torch.tensor([1.0, 7.940300918e-02, 4.700753866e-03, 9.115830922e-04, 1.767766953e-04,
                            3.428102196e-05, 6.647869871e-06, 1.289173172e-06])
    test.close(rope_inverse_frequencies(llama3, 16), by_hand, "llama3 inverse frequencies (head_dim 16, "
               "theta 5e5, factor 8, original 64) equal the values computed by hand", rtol=2e-6, atol=0)


def self_test_attention(test):
    B, H, KV, T, D = 1, 4, 2, 5, 8
    q, k, v = torch.randn(B, H, T, D), torch.randn(B, KV, T, D), torch.randn(B, KV, T, D)
    out = attention(q, k, v, causal_allowed(T), 0.5)
    for h in range(H):
        kv = h // (H // KV)  # query heads 0,1 -> kv head 0; 2,3 -> kv head 1
        single = attention(q[:, h:h + 1], k[:, kv:kv + 1], v[:, kv:kv + 1], causal_allowed(T), 0.5)
        test.close(out[:, h:h + 1], single, f"GQA: query head {h} of {H} reads kv head {kv} of {KV}")
    test.check(causal_allowed(4, 2).tolist() == [[True, False, False, False], [True, True, False, False],
                                                 [False, True, True, False], [False, False, True, True]],
               "sliding window 2 keeps the key itself and the one before")


def self_test_mixtral(test, work):
    make_model("mixtral", os.path.join(work, "mixtral"), seed=5)
    config, tensors = load_model(os.path.join(work, "mixtral"))
    weights = Weights(tensors)
    prefix = "model.layers.0.block_sparse_moe."
    x = torch.randn(6, config["hidden_size"])
    gate = tensors[prefix + "gate.weight"]
    experts = []
    for e in range(config["num_local_experts"]):
        w1, w2, w3 = (tensors[f"{prefix}experts.{e}.{w}.weight"] for w in ("w1", "w2", "w3"))
        experts.append(torch.nn.functional.silu(x @ w1.T) * (x @ w3.T) @ w2.T)
    experts = torch.stack(experts, dim=1)  # (N, E, C)
    probabilities = torch.softmax(x @ gate.T, dim=-1)
    dense = dict(config, num_experts_per_tok=config["num_local_experts"])
    test.close(mixtral_moe(x, weights, prefix, dense), (probabilities.unsqueeze(-1) * experts).sum(1),
               "Mixtral with all experts chosen equals the softmax-weighted sum of the experts")
    top2 = torch.zeros_like(x)
    for n in range(x.shape[0]):
        order = sorted(range(len(probabilities[n])), key=lambda e: -float(probabilities[n, e]))[:2]
        total = sum(float(probabilities[n, e]) for e in order)
        for e in order:
            top2[n] += float(probabilities[n, e]) / total * experts[n, e]
    test.close(mixtral_moe(x, weights, prefix, config), top2,
               "Mixtral top-2: the two most probable experts, weights renormalised to sum to 1")


def self_test_models(test, work):
    ids = [[3, 17, 42, 5, 88, 9, 61, 2, 30, 77, 1, 54]]
    gpt2 = {}
    for name, variants in [("default", []), ("no-prefix", ["no-prefix"]), ("no-lm-head", ["no-lm-head"]),
                           ("mask-buffers", ["mask-buffers", "no-prefix", "no-lm-head"])]:
        make_model("gpt2", os.path.join(work, "gpt2-" + name), seed=1, variants=variants)
        gpt2[name] = logits_of(os.path.join(work, "gpt2-" + name), ids)
    for name in ("no-prefix", "no-lm-head", "mask-buffers"):
        test.check(torch.equal(gpt2[name], gpt2["default"]), f"GPT-2 {name} gives the same logits")
    with open(os.path.join(work, "gpt2-default", "config.json")) as f:
        gpt2_config_json = json.load(f)
    buffers = read_model_tensors(os.path.join(work, "gpt2-mask-buffers"))
    test.check(list(buffers["h.0.attn.bias"].shape) == [1, 1, 128, 128] and "h.1.attn.masked_bias" in buffers
               and "lm_head.weight" not in buffers and "wte.weight" in buffers,
               "GPT-2 mask-buffers/no-prefix/no-lm-head names")
    test.check(gpt2_config_json["architectures"] == ["GPT2LMHeadModel"], "GPT-2 config.json architectures")

    for arch, variants in [("gpt2", []), ("llama", ["gqa", "llama3-rope", "head-dim", "untied"]),
                           ("qwen2", []), ("mistral", []), ("mixtral", [])]:
        model = os.path.join(work, "causal-" + arch)
        make_model(arch, model, seed=2, variants=variants)
        full = logits_of(model, ids)
        test.close(logits_of(model, [ids[0][:5]]), full[:, :5], f"{arch}: logits are causal (a prefix's "
                   "logits equal the first positions of the whole sequence's)")
        batch = logits_of(model, [ids[0], ids[0][::-1]])
        test.close(batch[:1], full, f"{arch}: a batch's first sequence equals it alone")

    for arch in ("mistral", "qwen2"):
        make_model(arch, os.path.join(work, arch + "-full"), seed=4)
        make_model(arch, os.path.join(work, arch + "-window"), seed=4, variants=["sliding-window"])
        full = logits_of(os.path.join(work, arch + "-full"), ids)
        window = logits_of(os.path.join(work, arch + "-window"), ids)
        test.close(window[:, :8], full[:, :8], f"{arch}: sliding window 8 changes nothing in the first 8")
        test.check(not torch.allclose(window[:, 8:], full[:, 8:], atol=1e-3),
                   f"{arch}: sliding window 8 changes the logits after position 8")

    make_model("llama", os.path.join(work, "tied"), seed=6)
    make_model("llama", os.path.join(work, "inv-freq"), seed=6, variants=["inv-freq-buffers"])
    test.check(torch.equal(logits_of(os.path.join(work, "inv-freq"), ids),
                           logits_of(os.path.join(work, "tied"), ids)),
               "llama: stored rotary_emb.inv_freq buffers are ignored (same logits)")
    make_model("llama", os.path.join(work, "untied"), seed=6, variants=["untied"])
    tied = read_model_tensors(os.path.join(work, "tied"))
    untied = read_model_tensors(os.path.join(work, "untied"))
    test.check("lm_head.weight" not in tied and "lm_head.weight" in untied,
               "llama: a tied head is not stored, an untied one is")
    qwen2 = read_model_tensors(os.path.join(work, "qwen2-full"))
    test.check("model.layers.0.self_attn.q_proj.bias" in qwen2 and "model.layers.0.self_attn.o_proj.bias"
               not in qwen2 and "model.layers.0.mlp.up_proj.bias" not in qwen2,
               "qwen2: biases on q/k/v only")

    for arch, variant in [("llama", "rope-yarn"), ("mistral", "unknown-arch")]:
        make_model(arch, os.path.join(work, variant), seed=0, variants=[variant])
        try:
            logits_of(os.path.join(work, variant), ids)
            refused = False
        except ValueError:
            refused = True
        test.check(refused, f"the reference refuses {arch} {variant}")


def command_self_test(args):
    test = SelfTest()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as work:
        self_test_formats(test, work)
        self_test_rope(test)
        self_test_attention(test)
        self_test_mixtral(test, work)
        self_test_models(test, work)
    print(f"hf_models.py self-test: {test.failures} failure(s)")
    return 1 if test.failures else 0


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("make", help="write a small random model in the HF layout")
    make.add_argument("--arch", required=True, choices=sorted(VARIANTS))
    make.add_argument("--out", required=True)
    make.add_argument("--seed", type=int, default=0)
    make.add_argument("--dtype", choices=sorted(DTYPES_BY_NAME), default="f32")
    make.add_argument("--shards", type=int, default=1)
    make.add_argument("--variant", action="append", default=[])
    logits = commands.add_parser("logits", help="the reference logits of token ids")
    logits.add_argument("--model", required=True)
    logits.add_argument("--ids", required=True)
    logits.add_argument("--out", required=True)
    generate = commands.add_parser("generate", help="greedy decoding with the reference")
    generate.add_argument("--model", required=True)
    generate.add_argument("--ids", required=True)
    generate.add_argument("--max-new-tokens", type=int, required=True)
    commands.add_parser("self-test", help="check this script against known facts")
    args = parser.parse_args(argv)
    handlers = {"make": command_make, "logits": command_logits, "generate": command_generate,
                "self-test": command_self_test}
    try:
        return handlers[args.command](args) or 0
    except ValueError as error:
        print(f"hf_models.py {args.command}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
