"""Train-step throughput (tokens/s) of the SFT and GRPO steps, rewardsql_jax vs PyTorch, on the same model.

Ours: ``training.make_train_step`` (jitted, donated state; AdamW + global-norm clipping). PyTorch: the
same architecture as ``transformers.Qwen2ForCausalLM`` (fp32, eager attention), ``torch.optim.AdamW`` and
``clip_grad_norm_``; the SFT loss is the model's own shifted cross-entropy, the GRPO loss TRL's formula
(clipped ratio, k3 KL to precomputed reference log-probs, per-sequence token mean). Compile time (ours) and
the first torch step are excluded and reported apart. Ours passes ``target_tokens`` (the batch's most loss /
completion tokens in a row) so the vocabulary projection runs at those positions only, as the SFT stage does;
the loss and gradients are those of the full projection (``tests/training/test_families.py``);
``--full-projection`` projects every position, as torch does. Tokens/s counts every position of the [B, T] batch.
On a GPU, model FLOPs utilisation uses 6 * params * tokens + attention (12 * L * T * d per token), against
``--peak-tflops`` (default: H100/H200 dense bf16, 989).

The two frameworks' timed steps alternate (ours, torch, ours, ...) so that a load that comes and goes on a shared
host falls on both columns alike; each column is the median of ``--iters`` steps. ``--single-thread`` runs XLA and
torch on one thread each and adds the ratio of process CPU time per step, the figure a loaded host does not move
much (torch's thread pool collapses when its threads are descheduled; see benchmarks/RESULTS.md).

    python benchmarks/train_step.py --quick     # ~12M config only
    python benchmarks/train_step.py --quick --single-thread   # one thread each; CPU-time ratio too
    python benchmarks/train_step.py             # ~12M and Qwen2.5-0.5B shape (batch 2 x seq 128)
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import platform
import statistics
import sys
import time

if "--single-thread" in sys.argv:  # must be set before jax initialises its CPU backend
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    )

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
    cpu_s: float = float("nan")  # median process CPU seconds per step (meaningful single-threaded)

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


def _timed(fn):
    t, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t, time.process_time() - c


def jax_step(shape, loss, dtype, full_projection=False):
    """(one step as a no-argument function, parameter count, a function that frees the state)."""
    sft, rl = make_batches(shape)
    cfg = model_config(shape, dtype)
    state = create_train_state(build_model(cfg), make_optimizer(OptimizerConfig(learning_rate=LR)))
    batch = sft if loss == "sft" else rl
    opts = {} if loss == "sft" else {"clip_eps": CLIP_EPS, "beta": BETA}
    if not full_projection:  # vocab projection at the loss positions only (same loss and gradients)
        mask = sft.loss_mask if loss == "sft" else rl.completion_mask
        opts["target_tokens"] = int(np.asarray(mask)[:, 1:].sum(axis=1).max())
    step = make_train_step(state.graphdef, loss, opts)
    n = count_params(state.model())
    box = {"state": state}

    def one():
        box["state"], metrics = step(box["state"], batch)
        jax.block_until_ready(metrics["loss"])

    return one, n, box.clear


def torch_step(shape, loss):
    """(one step as a no-argument function, a function that frees the model)."""
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
    box = {"model": transformers.Qwen2ForCausalLM(hf_cfg).float().train()}
    box["model"].config._attn_implementation = "sdpa"
    box["opt"] = torch.optim.AdamW(box["model"].parameters(), lr=LR, weight_decay=0.0)
    ids = torch.as_tensor(sft.input_ids, dtype=torch.long)
    attn = torch.as_tensor(sft.attention_mask)
    labels = torch.where(torch.as_tensor(sft.loss_mask) > 0, ids, -100)
    t = {k: torch.as_tensor(getattr(rl, k)) for k in ("completion_mask", "old_logprobs", "ref_logprobs", "advantages")}

    def grpo_loss(model):
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
        model, opt = box["model"], box["opt"]
        opt.zero_grad(set_to_none=True)
        out = model(input_ids=ids, attention_mask=attn, labels=labels).loss if loss == "sft" else grpo_loss(model)
        out.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    return one, box.clear


def bench_pair(shape, loss, iters, dtype, full_projection=False, with_torch=True):
    """(ours, torch or None, parameter count): compile / first steps apart, then the timed steps alternating."""
    steps = {"jax": jax_step(shape, loss, dtype, full_projection)}
    n = steps["jax"][1]
    if with_torch:
        steps["torch"] = torch_step(shape, loss)
    first = {name: _timed(fns[0])[0] for name, fns in steps.items()}
    times = {name: [] for name in steps}
    for _ in range(iters):
        for name, fns in steps.items():
            times[name].append(_timed(fns[0]))
    results = {}
    for name, fns in steps.items():
        wall, cpu = zip(*times[name])
        tokens = SHAPES[shape]["batch"] * SHAPES[shape]["seq"]
        results[name] = Result(shape, loss, name, statistics.median(wall), first[name], tokens, statistics.median(cpu))
        fns[-1]()  # free the state / model before the next measurement
    gc.collect()
    return results["jax"], results.get("torch"), n


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
    p.add_argument(
        "--single-thread",
        action="store_true",
        help="XLA and torch on one thread each; adds the ratio of process CPU time per step",
    )
    p.add_argument("--batch", type=int, default=None, help="override the shapes' batch size (e.g. an MFU run)")
    p.add_argument("--seq", type=int, default=None, help="override the shapes' sequence length")
    args = p.parse_args()
    for s in SHAPES.values():
        s.update({k: v for k, v in (("batch", args.batch), ("seq", args.seq)) if v is not None})
    if args.single_thread and not args.no_torch:
        import torch

        torch.set_num_threads(1)
    backend = jax.default_backend()
    print(
        f"backend={backend} devices={jax.device_count()} machine={platform.machine()} "
        f"jax={jax.__version__} compute_dtype={args.dtype}" + (" threads=1 each" if args.single_thread else "")
    )
    shapes = args.shape or (["12M"] if args.quick else ["12M", "0.5B"])
    cpu_cols = f" {'jax cpu ms':>10} {'torch cpu ms':>12} {'cpu ratio':>9}" if args.single_thread else ""
    print(
        f"{'shape':6} {'loss':5} {'params':>8} {'B x T':>8} {'jax tok/s':>10} {'torch tok/s':>11} {'ratio':>6} "
        f"{'jax compile s':>13}" + cpu_cols + ("  MFU" if backend == "gpu" else "")
    )
    for shape in shapes:
        for loss in ("sft", "grpo"):
            ours, ref, n = bench_pair(shape, loss, args.iters, args.dtype, args.full_projection, not args.no_torch)
            bt = f"{SHAPES[shape]['batch']}x{SHAPES[shape]['seq']}"
            torch_col = f"{ref.tokens_per_s:11.1f}" if ref else f"{'-':>11}"
            ratio = f"{ours.tokens_per_s / ref.tokens_per_s:6.2f}" if ref else f"{'-':>6}"
            line = (
                f"{shape:6} {loss:5} {n / 1e6:7.1f}M {bt:>8} {ours.tokens_per_s:10.1f} {torch_col} {ratio} "
                f"{ours.first_s:13.1f}"
            )
            if args.single_thread:
                ref_cpu = f"{1000 * ref.cpu_s:12.1f}" if ref else f"{'-':>12}"
                cpu_ratio = f"{ref.cpu_s / ours.cpu_s:9.2f}" if ref else f"{'-':>9}"
                line += f" {1000 * ours.cpu_s:10.1f} {ref_cpu} {cpu_ratio}"
            if backend == "gpu":
                line += f"  {100 * mfu(ours, n, shape, args.peak_tflops):.1f}%"
            print(line, flush=True)


if __name__ == "__main__":
    main()
