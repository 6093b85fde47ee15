"""Part 3 + 4 of benchmarks/pretrained_135m.py: the SFT and GRPO train steps of the default, ours (each batch
layout, optionally with LoRA adapters) against torch + AdamW (optionally + peft) on the same examples."""

from __future__ import annotations

import contextlib
import copy
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import torch
from _bench_timing import alternate, compile_s, ratio
from _default_135m_data import DefaultData, left_pad, spread
from flax import nnx

from rewardsql_jax.models.adapters import add_adapters
from rewardsql_jax.models.lora import TARGETS, LoRAConfig
from rewardsql_jax.rl import policy_loss
from rewardsql_jax.training.batch import SFTBatch
from rewardsql_jax.training.collate import bucket_length, grouped_rl_batch, rl_batch, rl_length, sft_arrays
from rewardsql_jax.training.optimizer import OptimizerConfig, make_optimizer
from rewardsql_jax.training.prefix_groups import (
    grouped_sft_batch,
    grouped_slots,
    prefix_group_batches,
    shared_prefix_lengths,
)
from rewardsql_jax.training.state import create_train_state
from rewardsql_jax.training.step import make_train_step

OLD_NOISE = 0.1  # GRPO: old log-probs = the policy's + N(0, OLD_NOISE^2), so ratios and clipping do work


def fresh(model):
    """A copy of an NNX model with its own buffers (a train step donates its state's arrays)."""
    graphdef, state = nnx.split(model)
    return nnx.merge(graphdef, jax.tree.map(jnp.copy, state))


def autocast(dtype: str):
    if dtype == "bfloat16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


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
