"""Decode throughput of ``rewardsql_jax.sampling.generate`` vs ``transformers`` ``generate`` (PyTorch CPU).

Same random Qwen2 weights in both (copied in memory through the HF key table), greedy, fp32, the
same batch of prompts; both measured in one run. Our compile time is measured on a warm-up call
and reported separately. For the Qwen2.5-0.5B shape it also prints a CPU roofline estimate: bytes
read per decode step (parameters + KV cache) over the measured step time, against a memory
bandwidth measured here with a numpy copy, plus achieved FLOP/s against a measured numpy matmul.

    python benchmarks/sampler.py            # ~12M config and the Qwen2.5-0.5B shape
    python benchmarks/sampler.py --quick    # ~12M config only
    python benchmarks/sampler.py --single-thread   # torch and XLA each on one thread (fairer on a loaded host)
    python benchmarks/sampler.py --grpo     # + the GRPO rollout shape: the tiny model of benchmarks/grpo_vs_trl.py,
                                            #   4 prompts of ~480 tokens x 8 samples, T=1, 64 new tokens
    python benchmarks/sampler.py --quick --grpo --grpo-prompts 4 16   # also 16 prompts x 8 samples

The ``--grpo`` row samples (T=1, no top-k/top-p on either side) rather than decoding greedily, so the tokens
differ between the two (different random streams); both produce exactly ``new_tokens`` tokens per row (no EOS),
so the work is the same. There our sampler prefills each prompt once for its 8 samples, HF's
``num_return_sequences`` prefills every copy.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
import time

if "--single-thread" in sys.argv:  # must be set before jax initialises its CPU backend
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    )

import jax
import jax.numpy as jnp
import numpy as np
import torch
from flax import nnx
from transformers import Qwen2Config, Qwen2ForCausalLM

from rewardsql_jax.models import build_model
from rewardsql_jax.models.registry import config_from_hf, hf_key_table
from rewardsql_jax.sampling import generate

SMALL = dict(
    vocab_size=8192,
    hidden_size=384,
    intermediate_size=1024,
    num_hidden_layers=6,
    num_attention_heads=6,
    num_key_value_heads=2,
    tie_word_embeddings=True,
)
QWEN25_05B = dict(
    vocab_size=151936,
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    tie_word_embeddings=True,
)


@dataclasses.dataclass(frozen=True)
class Row:
    name: str
    params: int
    hf_s: float
    hf_prefill_s: float
    ours_s: float
    compile_s: float
    prefill_s: float
    step_s: float
    match: float
    cpu: tuple = ()  # process CPU seconds (hf, hf_prefill, ours, ours_prefill); meaningful single-threaded


def jax_twin(torch_model):
    """NNX model holding ``torch_model``'s weights."""
    cfg = config_from_hf(torch_model.config.to_dict())
    graphdef, state = nnx.split(nnx.eval_shape(lambda: build_model(cfg)))
    sd = torch_model.state_dict()
    flat = dict(nnx.to_flat_state(state))
    for row in hf_key_table(cfg):
        w = sd[row.key].detach().numpy()
        flat[row.path] = flat[row.path].replace(jnp.asarray(w.T if row.transpose else w))
    return nnx.merge(graphdef, nnx.from_flat_state(list(flat.items())))


def timed(fn, repeats=1, cpu_out=None):
    """Best wall time of ``repeats`` calls and the last result; the best process CPU time is
    appended to ``cpu_out`` when given (on a shared host, single-threaded CPU time is the figure that
    does not depend on what else runs)."""
    best, best_cpu, out = float("inf"), float("inf"), None
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        best, best_cpu = min(best, time.perf_counter() - t), min(best_cpu, time.process_time() - c)
    if cpu_out is not None:
        cpu_out.append(best_cpu)
    return best, out


def bench(name, shape, *, batch, prompt_len, new_tokens, repeats):
    torch.manual_seed(0)
    hf_cfg = Qwen2Config(max_position_embeddings=4096, use_sliding_window=False, **shape)
    tm = Qwen2ForCausalLM(hf_cfg).eval()
    jm = jax_twin(tm)
    n_params = sum(p.numel() for p in tm.parameters())
    prompts = np.random.default_rng(0).integers(0, shape["vocab_size"], size=(batch, prompt_len))
    ids = torch.tensor(prompts)

    def hf_run(n):
        with torch.inference_mode():
            return tm.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=n,
                min_new_tokens=n,
                do_sample=False,
                pad_token_id=0,
                eos_token_id=None,
            )[:, prompt_len:].numpy()

    cache = prompt_len + new_tokens  # one cache length: the 1-token and n-token runs share a compile

    def ours(n):
        return generate(jm, prompts.tolist(), max_new_tokens=n, max_cache_len=cache)

    t = _time_both(None if NO_HF else hf_run, ours, new_tokens, repeats)
    match = float("nan") if NO_HF else float(np.mean(np.asarray(t.ours_out.tokens) == t.hf_out))
    return t.row(name, n_params, match), shape


@dataclasses.dataclass(frozen=True)
class _Times:
    hf_s: float
    hf_out: object
    hf_prefill_s: float
    ours_s: float
    ours_out: object
    compile_s: float
    prefill_s: float
    step_s: float
    cpu: tuple

    def row(self, name, params, match) -> Row:
        return Row(
            name,
            params,
            self.hf_s,
            self.hf_prefill_s,
            self.ours_s,
            self.compile_s,
            self.prefill_s,
            self.step_s,
            match,
            self.cpu,
        )


def _time_both(hf_run, ours, new_tokens, repeats) -> _Times:
    """HF (after a warm-up) then ours (after a compiling call): n-token and 1-token runs, best of ``repeats``."""
    cpu = []
    if hf_run is None:  # --no-hf (an accelerator host: our side only)
        hf_s, hf_out, hf_prefill_s = float("nan"), None, float("nan")
        cpu += [float("nan")] * 2
    else:
        hf_run(2)  # warm-up (allocator, kernels)
        hf_s, hf_out = timed(lambda: hf_run(new_tokens), repeats, cpu)
        hf_prefill_s, _ = timed(lambda: hf_run(1), repeats, cpu)
    t0 = time.perf_counter()
    ours(new_tokens)
    first = time.perf_counter() - t0
    ours_s, res = timed(lambda: ours(new_tokens), repeats, cpu)
    prefill_s, _ = timed(lambda: ours(1), repeats, cpu)
    return _Times(
        hf_s,
        hf_out,
        hf_prefill_s,
        ours_s,
        res,
        max(first - ours_s, 0.0),
        prefill_s,
        (ours_s - prefill_s) / (new_tokens - 1),
        tuple(cpu),
    )


NO_HF = False  # --no-hf
GRPO_TINY = dict(
    vocab_size=1024,
    hidden_size=128,
    intermediate_size=384,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    tie_word_embeddings=True,
)


def bench_grpo(*, prompts=4, samples=8, new_tokens=64, repeats=2):
    """Sampling throughput on the GRPO rollout shape (module docstring); returns (Row, shape)."""
    torch.manual_seed(0)
    tm = Qwen2ForCausalLM(Qwen2Config(max_position_embeddings=4096, use_sliding_window=False, **GRPO_TINY)).eval()
    jm = jax_twin(tm)
    rng = np.random.default_rng(0)
    lens = [481 + 2 * i for i in range(prompts)]
    prompt_lists = [rng.integers(1, GRPO_TINY["vocab_size"], n).tolist() for n in lens]
    width = max(lens)
    ids = torch.zeros((prompts, width), dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, p in enumerate(prompt_lists):  # left padding, as HF recommends for decoder-only generation
        ids[i, width - len(p) :] = torch.tensor(p)
        attn[i, width - len(p) :] = 1

    def hf_run(n):
        with torch.inference_mode():
            return tm.generate(
                input_ids=ids,
                attention_mask=attn,
                max_new_tokens=n,
                min_new_tokens=n,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                num_return_sequences=samples,
                pad_token_id=0,
                eos_token_id=None,
            )

    cache = width + new_tokens

    def ours(n):
        return generate(
            jm, prompt_lists, max_new_tokens=n, temperature=1.0, num_samples=samples, max_cache_len=cache, seed=n
        )

    t = _time_both(None if NO_HF else hf_run, ours, new_tokens, repeats)
    assert all(len(x) == new_tokens for x in t.ours_out.tokens)
    return t.row(f"grpo-tiny {prompts}x{samples}", sum(p.numel() for p in tm.parameters()), float("nan")), GRPO_TINY


def measured_bandwidth(nbytes=1 << 30):
    """Host memory bandwidth (bytes/s) of a numpy copy: reads + writes ``nbytes`` each."""
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    best = min(timed(lambda: np.copyto(dst, src))[0] for _ in range(3))
    return 2 * nbytes / best


def measured_matmul_flops(n=2048):
    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    np.dot(a, a)
    t, _ = timed(lambda: np.dot(a, a), 3)
    return 2 * n**3 / t


def roofline(row: Row, shape, *, batch, cache_len, hbm_gbps=None):
    head_dim = shape["hidden_size"] // shape["num_attention_heads"]
    layers, kv = shape["num_hidden_layers"], shape["num_key_value_heads"]
    param_bytes = 4 * row.params
    kv_bytes = 2 * layers * batch * cache_len * kv * head_dim * 4
    embed = shape["vocab_size"] * shape["hidden_size"]
    # matmul FLOPs of one decode step: every weight once per row (tied embedding used as the lm head),
    # attention QK^T and PV over the cache.
    flops = 2 * batch * row.params + 4 * batch * layers * shape["num_attention_heads"] * head_dim * cache_len
    flops -= 0 if shape["tie_word_embeddings"] else 2 * batch * embed  # the input embedding is a gather
    on_host = hbm_gbps is None
    bw, peak = (measured_bandwidth(), measured_matmul_flops()) if on_host else (hbm_gbps * 1e9, float("nan"))
    bw_name = "numpy-copy bandwidth" if on_host else "HBM peak"
    achieved_bw = (param_bytes + kv_bytes) / row.step_s
    print(f"\nroofline ({row.name}, one decode step, batch {batch}, cache {cache_len}):")
    print(f"  bytes read/step  {param_bytes / 1e9:.3f} GB params + {kv_bytes / 1e6:.1f} MB KV")
    print(
        f"  step time        {row.step_s * 1e3:.1f} ms  -> {achieved_bw / 1e9:.2f} GB/s "
        f"vs {bw_name} {bw / 1e9:.2f} GB/s ({100 * achieved_bw / bw:.0f}% of memory roofline)"
    )
    print(
        f"  FLOPs/step       {flops / 1e9:.2f} GFLOP -> {flops / row.step_s / 1e9:.1f} GFLOP/s "
        f"vs numpy fp32 matmul {peak / 1e9:.1f} GFLOP/s ({100 * flops / row.step_s / peak:.0f}%)"
    )
    print(
        f"  bound            memory time {1e3 * (param_bytes + kv_bytes) / bw:.1f} ms, "
        f"compute time {1e3 * flops / peak:.1f} ms per step"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="only the ~12M-parameter config")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2, help="timed repetitions (best is reported)")
    ap.add_argument("--single-thread", action="store_true", help="one thread for torch and for XLA")
    ap.add_argument("--no-hf", action="store_true", help="time our sampler only (e.g. on an accelerator host)")
    ap.add_argument(
        "--hbm-gbps",
        type=float,
        default=None,
        help="roofline against this memory bandwidth (an accelerator's HBM peak, e.g. 4800 for an H200) "
        "instead of a numpy copy measured on the host",
    )
    ap.add_argument("--grpo", action="store_true", help="add the GRPO rollout shape (4 prompts x 8 samples, T=1)")
    ap.add_argument(
        "--grpo-prompts",
        type=int,
        nargs="+",
        default=[4],
        help="prompt counts of the GRPO rows (8 samples each), e.g. --grpo-prompts 4 16",
    )
    args = ap.parse_args()
    global NO_HF
    NO_HF = args.no_hf
    if args.single_thread:
        torch.set_num_threads(1)
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs visible, "
        f"jax {jax.__version__} ({jax.default_backend()}), torch {torch.__version__} ({torch.get_num_threads()} threads)"
    )
    print(f"batch {args.batch}, prompt {args.prompt_len}, {args.new_tokens} new tokens, greedy, fp32\n")
    cases = [("qwen2-12M", SMALL)] + ([] if args.quick else [("qwen2.5-0.5B", QWEN25_05B)])
    rows = []
    for name, shape in cases:
        rows.append(
            bench(
                name,
                shape,
                batch=args.batch,
                prompt_len=args.prompt_len,
                new_tokens=args.new_tokens,
                repeats=args.repeats,
            )
        )
        print(f"done: {rows[-1][0]}", flush=True)
    rows = [(r, s, args.batch * args.new_tokens) for r, s in rows]
    for prompts in args.grpo_prompts if args.grpo else ():
        row, shape = bench_grpo(prompts=prompts, new_tokens=args.new_tokens, repeats=args.repeats)
        rows.append((row, shape, 8 * prompts * args.new_tokens))
        print(f"done: {row.name}", flush=True)
    print("end-to-end = prefill + all decode steps; decode = per-step time from (t[n tokens] - t[1 token]) / (n - 1)")
    print(
        f"{'model':<18}{'params':>9}{'HF tok/s':>10}{'ours tok/s':>12}{'ratio':>7}"
        f"{'HF step ms':>12}{'ours step ms':>14}{'decode ratio':>14}"
        f"{'HF prefill s':>14}{'ours prefill s':>16}{'compile s':>11}{'same tokens':>13}"
    )
    for row, _, n in rows:
        hf_step = (row.hf_s - row.hf_prefill_s) / (args.new_tokens - 1)
        print(
            f"{row.name:<18}{row.params / 1e6:>8.1f}M{n / row.hf_s:>10.1f}{n / row.ours_s:>12.1f}"
            f"{row.hf_s / row.ours_s:>6.2f}x{hf_step * 1e3:>12.1f}{row.step_s * 1e3:>14.1f}"
            f"{hf_step / row.step_s:>13.2f}x{row.hf_prefill_s:>14.2f}{row.prefill_s:>16.2f}"
            f"{row.compile_s:>11.1f}{'-' if NO_HF else 'sampled' if row.match != row.match else f'{100 * row.match:.0f}%':>13}"
        )
    if args.single_thread:
        print("\nsame runs by process CPU time (one thread each, so this is the time on an idle core):")
        print(
            f"{'model':<18}{'HF tok/s':>10}{'ours tok/s':>12}{'ratio':>7}{'HF step ms':>12}{'ours step ms':>14}"
            f"{'decode ratio':>14}{'HF prefill s':>14}{'ours prefill s':>16}"
        )
        for row, _, n in rows:
            hf, hf_pre, us, us_pre = row.cpu
            hf_step, us_step = (hf - hf_pre) / (args.new_tokens - 1), (us - us_pre) / (args.new_tokens - 1)
            print(
                f"{row.name:<18}{n / hf:>10.1f}{n / us:>12.1f}{hf / us:>6.2f}x{hf_step * 1e3:>12.1f}"
                f"{us_step * 1e3:>14.1f}{hf_step / us_step:>13.2f}x{hf_pre:>14.2f}{us_pre:>16.2f}"
            )
    for row, shape, _ in rows:
        if shape is QWEN25_05B:
            roofline(row, shape, batch=args.batch, cache_len=args.prompt_len + args.new_tokens, hbm_gbps=args.hbm_gbps)


if __name__ == "__main__":
    main()
