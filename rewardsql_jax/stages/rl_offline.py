"""Offline RL from PRM-scored candidates (Reward-SQL Sec. 5.2): DPO and rejection sampling (RS).

The SFT policy samples ``rl.samples_per_prompt`` candidates (temperature ``rl.temperature``) for each of up to
``rl.steps * rl.prompts_per_step`` training questions (a seeded subset: the same question budget as the
online run). Each candidate gets PR = min of its PRM step scores (the Best-of-N aggregation) and OR = 1 when
it executes to the gold result (BIRD rule); R = PR + OR. Candidates are saved to ``rl/candidates.jsonl`` so a
resumed run does not sample again.

  dpo  one pair per question: C_w = argmax R, C_l = argmin R, kept when R_w > R_l (ideally the +PR/+OR vs
       -PR/-OR quadrants, Sec. 5.5); loss ``dpo`` (beta ``rl.dpo_beta``) against the SFT policy as reference.
  rs   SFT on D_filtered = {C_i : R_i > rl.rs_threshold}. ``losses.rs`` applies that filter inside a fixed
       batch of all candidates; filtering on the host and training the ``sft`` loss on the kept ones is the
       same objective without spending compute on rejected rows.

Both train ``rl.steps`` optimizer steps of ``rl.prompts_per_step`` pairs / sequences (epochs of a seeded
permutation). With no pair / no kept candidate the policy stays the SFT policy and the metrics say so.
"""
from __future__ import annotations

import json
import time

import jax
import numpy as np
from tqdm.auto import tqdm

from rewardsql_jax.distributed import barrier, is_primary
from rewardsql_jax.rewards.prm_scoring import aggregate_steps

from .context import RunContext
from rewardsql_jax.training.collate import batch_indices
from .policy import save_model
from .rl import (checkpoint_every, checkpoint_or_stop, load_prm_scorer, new_state, resume, rl_data, stop_after,
                 train_step)
from rewardsql_jax.training.collate import preference_batch, sft_batch
from .rl_online import sampler_prompts
from .rl_rollouts import sample_rollouts, score_rows


def _candidates(ctx: RunContext, data, state) -> list[dict]:
    """Sample, execute and PRM-score the candidates once; reread them on a rerun."""
    path = ctx.stage_dir("rl") / "candidates.jsonl"
    if path.exists():
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    cfg, rl, tok, pool = ctx.config, ctx.config.rl, ctx.tokenizer(), ctx.pool()
    rng = np.random.default_rng(cfg.seed)
    idx = rng.permutation(len(data.records))[:rl.steps * rl.prompts_per_step]
    scorer = load_prm_scorer(ctx)
    t0 = time.perf_counter()
    ro = sample_rollouts(state.model(), tok, [data.records[i] for i in idx], [data.prompt_ids[i] for i in idx],
                         samples=rl.samples_per_prompt, temperature=rl.temperature, max_new_tokens=rl.max_new_tokens,
                         seed=cfg.seed * 100_003 + 7, prompts_per_call=sampler_prompts(rl),
                         host_fn=lambda recs, toks: score_rows(tok, pool, recs, toks, clauses=False,
                                                                        ex_mode=cfg.data.ex_mode))
    scores = scorer.score([r["prompt"] for r in ro.records], [c.text for c in ro.completions])
    out = []
    for r, (q, p, t, c) in enumerate(zip(np.repeat(idx, rl.samples_per_prompt), ro.prompt_ids, ro.token_ids,
                                         ro.completions)):
        pr, orr = aggregate_steps(scores[r], "min"), float(ro.outcomes.rewards[r])
        out.append({"question": int(q), "prompt_ids": p, "token_ids": t, "text": c.text, "step_scores": scores[r],
                    "pr": pr, "or": orr, "reward": pr + orr})
    if is_primary():  # every process computed the same records
        path.write_text("".join(json.dumps(c) + "\n" for c in out))
    barrier('rl_offline.py')
    ctx.log({"stage": "rl", "candidates": len(out), "candidate_seconds": time.perf_counter() - t0,
             "candidate_tokens_per_s": ro.tokens / max(ro.sample_seconds, 1e-9)})
    return out


def dpo_pairs(candidates: list[dict]) -> list[tuple[dict, dict]]:
    """(best, worst) candidate by R = PR + OR per question, when the best is strictly better."""
    by_q: dict[int, list[dict]] = {}
    for c in candidates:
        by_q.setdefault(c["question"], []).append(c)
    pairs = []
    for group in by_q.values():
        best = max(group, key=lambda c: c["reward"])
        worst = min(group, key=lambda c: c["reward"])
        if best["reward"] > worst["reward"]:
            pairs.append((best, worst))
    return pairs


def rs_kept(candidates: list[dict], threshold: float) -> list[dict]:
    """D_filtered of Sec. 5.2: candidates with R > tau."""
    return [c for c in candidates if c["reward"] > threshold]


def _quadrant(c: dict) -> str:
    """PR/OR quadrant of a candidate as the evaluate stage's Table 1 (+PR: PR >= 0.5)."""
    return f"{'+' if c['pr'] >= 0.5 else '-'}PR/{'+' if c['or'] > 0 else '-'}OR"


def run_offline(ctx: RunContext) -> dict:
    cfg, rl, out = ctx.config, ctx.config.rl, ctx.stage_dir("rl")
    tok, data = ctx.tokenizer(), rl_data(ctx)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    state = new_state(ctx)
    t0 = time.perf_counter()
    cands = _candidates(ctx, data, state)
    if rl.algorithm == "dpo":
        items = dpo_pairs(cands)
        step_fn = train_step(ctx, state, "dpo", {"beta": rl.dpo_beta})
        info = {"pairs": len(items), "chosen_quadrants": _count([_quadrant(a) for a, _ in items]),
                "rejected_quadrants": _count([_quadrant(b) for _, b in items])}
    else:
        items = rs_kept(cands, rl.rs_threshold)
        step_fn = train_step(ctx, state, "sft")
        info = {"kept": len(items), "kept_fraction": len(items) / max(len(cands), 1)}
    base = {"algorithm": rl.algorithm, "candidates": len(cands), "candidate_or_rate": _mean(cands, "or"),
            "candidate_pr_mean": _mean(cands, "pr"), **info}
    if not items:
        save_model(ctx, state.model(), out / "policy")
        return ctx.finish("rl", {**base, "steps": 0, "seconds": time.perf_counter() - t0,
                                 "warning": "nothing to train on (no pair with R_w > R_l / no candidate above "
                                            "rl.rs_threshold): rl/policy is the SFT policy"})
    ckpt, state, start, history = resume(ctx, out, state)
    limit, every, ran = stop_after(ctx), checkpoint_every(ctx), 0
    batches = batch_indices(len(items), rl.prompts_per_step, rl.steps - start, cfg.seed, start_step=start)
    try:
        for step, idx in zip(range(start, rl.steps), tqdm(batches, total=rl.steps - start, desc=f"rl ({rl.algorithm})")):
            batch = _batch(rl.algorithm, [items[i] for i in idx], data.length, pad)
            state, m = step_fn(state, batch)
            rec = {"step": step, "loss": float(m["loss"]), "grad_norm": float(m["grad_norm"]),
                   **({"reward_accuracy": float(m["rewards/accuracies"]), "reward_margin": float(m["rewards/margins"]),
                       # beta * log(pi / pi_ref) of each side: both falling is DPO's likelihood displacement
                       "reward_chosen": float(m["rewards/chosen"]), "reward_rejected": float(m["rewards/rejected"])}
                      if rl.algorithm == "dpo" else {})}
            history.append(rec)
            ctx.log({"stage": "rl", **rec})
            ran += 1
            checkpoint_or_stop(ckpt, state, step, rl.steps, history, ran=ran, limit=limit, every=every)
    finally:
        ckpt.close()
    jax.block_until_ready(state.params)
    save_model(ctx, state.model(), out / "policy")
    return ctx.finish("rl", {**base, "steps": len(history), "resumed_from_step": start,
                             "loss_curve": [(h["step"], h["loss"]) for h in history], "final_loss": history[-1]["loss"],
                             "seconds": time.perf_counter() - t0})


def _batch(algorithm, chosen, length, pad):
    if algorithm == "dpo":
        return preference_batch([a["prompt_ids"] for a, _ in chosen], [a["token_ids"] for a, _ in chosen],
                                [b["token_ids"] for _, b in chosen], length=length, pad_id=pad)
    return sft_batch([c["prompt_ids"] for c in chosen], [c["token_ids"] for c in chosen], length=length, pad_id=pad)


def _mean(cands, key):
    return float(np.mean([c[key] for c in cands])) if cands else 0.0


def _count(labels):
    return {k: labels.count(k) for k in sorted(set(labels))}
