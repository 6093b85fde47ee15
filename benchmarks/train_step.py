"""Train-step throughput (tokens/s) of the SFT and GRPO steps, rewardsql_jax vs PyTorch, on the same model.

Ours: ``training.make_train_step`` (jitted, donated state; AdamW + global-norm clipping). PyTorch: the
same architecture as ``transformers.Qwen2ForCausalLM`` (fp32, eager attention), ``torch.optim.AdamW`` and
``clip_grad_norm_``; the SFT loss is the model's own shifted cross-entropy, the GRPO loss TRL's formula
(clipped ratio, k3 KL to precomputed reference log-probs, per-sequence token mean). Compile time (ours) and
the first torch step are excluded and reported apart. Ours passes ``target_tokens`` (the batch's most loss /
completion tokens in a row) so the vocabulary projection runs at those positions only, as the SFT stage does;
the loss and gradients are those of the full projection (``tests/training/test_family_adapters.py``);
``--full-projection`` projects every position, as torch does. Tokens/s counts every position of the [B, T] batch.
On a GPU, model FLOPs utilisation uses 6 * params * tokens + attention (12 * L * T * d per token), against
``--peak-tflops`` (default: H100/H200 dense bf16, 989).

    python benchmarks/train_step.py --quick     # ~12M config only
    python benchmarks/train_step.py             # ~12M and Qwen2.5-0.5B shape (batch 2 x seq 128)
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import platform
import statistics
import time

import jax
import numpy as np

from rewardsql_jax.models import ModelConfig, build_model
from rewardsql_jax.models.transformer import count_params
from rewardsql_jax.training.batch import RLBatch, SFTBatch
from rewardsql_jax.training.optimizer import OptimizerConfig, make_optimizer
from rewardsql_jax.training.state import create_train_state
from rewardsql_jax.training.step import make_train_step

SHAPES = {
    "12M": dict(
        vocab_size=32000,
        hidden_size=256,
        intermediate_size=1024,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=32,
        batch=4,
        seq=128,
    ),
    "0.5B": dict(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        head_dim=64,
        batch=2,
        seq=128,
    ),
}
LR, CLIP_EPS, BETA = 1e-5, 0.2, 0.04


@dataclasses.dataclass(frozen=True)
class Result:
    shape: str
    loss: str
    framework: str
    step_s: float
    first_s: float
    tokens: int

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.step_s


def model_config(shape: str, dtype: str) -> ModelConfig:
    kw = {k: v for k, v in SHAPES[shape].items() if k not in ("batch", "seq")}
    return ModelConfig(
        model_type="qwen2", attention_bias=True, tie_word_embeddings=True, rope_theta=1e6, dtype=dtype, **kw
    )


def make_batches(shape: str, seed: int = 0):
    """(SFTBatch, RLBatch) of random tokens: half prompt, half completion; old/ref log-probs near uniform."""
    b, t, v = SHAPES[shape]["batch"], SHAPES[shape]["seq"], SHAPES[shape]["vocab_size"]
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, v, (b, t)).astype(np.int32)
    attn = np.ones((b, t), np.int32)
    comp = np.zeros((b, t), np.float32)
    comp[:, t // 2 :] = 1.0

    def lp():
        return (-np.log(v) + 0.1 * rng.normal(size=(b, t))).astype(np.float32)

    rl = RLBatch(
        ids, attn, comp, old_logprobs=lp(), advantages=rng.normal(size=(b, t)).astype(np.float32), ref_logprobs=lp()
    )
    return SFTBatch(ids, attn, comp), rl


def _median_time(fn, iters):
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_jax(shape, loss, iters, dtype, full_projection=False):
    sft, rl = make_batches(shape)
    cfg = model_config(shape, dtype)
    state = create_train_state(build_model(cfg), make_optimizer(OptimizerConfig(learning_rate=LR)))
    batch = sft if loss == "sft" else rl
    opts = {} if loss == "sft" else {"clip_eps": CLIP_EPS, "beta": BETA}
    if not full_projection:  # vocab projection at the loss positions only (same loss and gradients)
        mask = sft.loss_mask if loss == "sft" else rl.completion_mask
        opts["target_tokens"] = int(np.asarray(mask)[:, 1:].sum(axis=1).max())
    step = make_train_step(state.graphdef, loss, opts)
    box = {"state": state}

    def one():
        box["state"], metrics = step(box["state"], batch)
        jax.block_until_ready(metrics["loss"])

    t0 = time.perf_counter()
    one()
    first = time.perf_counter() - t0
    step_s = _median_time(one, iters)
    n = count_params(box["state"].model())
    box.clear()  # free the state before the next shape (the closure `one` still refers to box)
    state = None
    gc.collect()
    return Result(shape, loss, "jax", step_s, first, sft.input_ids.size), n


def bench_torch(shape, loss, iters):
    import torch
    import transformers

    sft, rl = make_batches(shape)
    s = SHAPES[shape]
    hf_cfg = transformers.Qwen2Config(
        vocab_size=s["vocab_size"],
        hidden_size=s["hidden_size"],
        intermediate_size=s["intermediate_size"],
        num_hidden_layers=s["num_hidden_layers"],
        num_attention_heads=s["num_attention_heads"],
        num_key_value_heads=s["num_key_value_heads"],
        tie_word_embeddings=True,
        rope_theta=1e6,
    )
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(hf_cfg).float().train()
    model.config._attn_implementation = "sdpa"
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    ids = torch.as_tensor(sft.input_ids, dtype=torch.long)
    attn = torch.as_tensor(sft.attention_mask)
    labels = torch.where(torch.as_tensor(sft.loss_mask) > 0, ids, -100)
    t = {k: torch.as_tensor(getattr(rl, k)) for k in ("completion_mask", "old_logprobs", "ref_logprobs", "advantages")}

    def grpo_loss():
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
        logp = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:, None])[..., 0]
        logp = torch.nn.functional.pad(logp, (1, 0))
        ratio = torch.exp(logp - t["old_logprobs"])
        a = t["advantages"]
        per_token = -torch.min(ratio * a, torch.clamp(ratio, 1 - CLIP_EPS, 1 + CLIP_EPS) * a)
        d = t["ref_logprobs"] - logp
        per_token = per_token + BETA * (torch.exp(d) - d - 1)
        m = t["completion_mask"]
        return ((per_token * m).sum(-1) / m.sum(-1).clamp(min=1)).mean()

    def one():
        opt.zero_grad(set_to_none=True)
        out = model(input_ids=ids, attention_mask=attn, labels=labels).loss if loss == "sft" else grpo_loss()
        out.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    t0 = time.perf_counter()
    one()
    first = time.perf_counter() - t0
    step_s = _median_time(one, iters)
    model = opt = None  # free them before the next shape (the closures refer to these names)
    gc.collect()
    return Result(shape, loss, "torch", step_s, first, sft.input_ids.size)


def mfu(result: Result, n_params: int, shape: str, peak_tflops: float) -> float:
    s = SHAPES[shape]
    per_token = 6 * n_params + 12 * s["num_hidden_layers"] * s["seq"] * s["hidden_size"]
    return per_token * result.tokens_per_s / (peak_tflops * 1e12)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="only the ~12M config")
    p.add_argument("--iters", type=int, default=5, help="timed steps per measurement (median reported)")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch side")
    p.add_argument("--dtype", default="float32", help="JAX compute dtype (master weights stay fp32)")
    p.add_argument("--peak-tflops", type=float, default=989.0, help="accelerator peak for MFU (GPU only)")
    p.add_argument(
        "--full-projection",
        action="store_true",
        help="ours projects every position onto the vocabulary (no target_tokens), as torch does",
    )
    p.add_argument("--shape", choices=sorted(SHAPES), action="append", help="only these shapes (repeatable)")
    p.add_argument("--batch", type=int, default=None, help="override the shapes' batch size (e.g. an MFU run)")
    p.add_argument("--seq", type=int, default=None, help="override the shapes' sequence length")
    args = p.parse_args()
    for s in SHAPES.values():
        s.update({k: v for k, v in (("batch", args.batch), ("seq", args.seq)) if v is not None})
    backend = jax.default_backend()
    print(
        f"backend={backend} devices={jax.device_count()} machine={platform.machine()} "
        f"jax={jax.__version__} compute_dtype={args.dtype}"
    )
    shapes = args.shape or (["12M"] if args.quick else ["12M", "0.5B"])
    print(
        f"{'shape':6} {'loss':5} {'params':>8} {'B x T':>8} {'jax tok/s':>10} {'torch tok/s':>11} {'ratio':>6} "
        f"{'jax compile s':>13}" + ("  MFU" if backend == "gpu" else "")
    )
    for shape in shapes:
        for loss in ("sft", "grpo"):
            ours, n = bench_jax(shape, loss, args.iters, args.dtype, args.full_projection)
            ref = None if args.no_torch else bench_torch(shape, loss, args.iters)
            bt = f"{SHAPES[shape]['batch']}x{SHAPES[shape]['seq']}"
            torch_col = f"{ref.tokens_per_s:11.1f}" if ref else f"{'-':>11}"
            ratio = f"{ours.tokens_per_s / ref.tokens_per_s:6.2f}" if ref else f"{'-':>6}"
            line = (
                f"{shape:6} {loss:5} {n / 1e6:7.1f}M {bt:>8} {ours.tokens_per_s:10.1f} {torch_col} {ratio} "
                f"{ours.first_s:13.1f}"
            )
            if backend == "gpu":
                line += f"  {100 * mfu(ours, n, shape, args.peak_tflops):.1f}%"
            print(line, flush=True)


if __name__ == "__main__":
    main()
