"""The offline RL loop (Reward-SQL Sec. 5.2; algorithms dpo / rs or a plugin's ``OfflineAlgorithm``).

The SFT policy samples ``rl.samples_per_prompt`` candidates (temperature ``rl.temperature``) for each of up to
``rl.steps * rl.prompts_per_step`` training questions (a seeded subset: the same question budget as the
online run). Each candidate gets PR = min of its PRM step scores (the Best-of-N aggregation) and OR = 1 when
it executes to the gold result (``data.ex_mode``); R = PR + OR. Candidates are saved to ``rl/candidates.jsonl``
so a resumed run does not sample again. The algorithm's ``select`` picks what to train on; ``rl.steps``
optimizer steps of ``rl.prompts_per_step`` items follow (epochs of a seeded permutation). With nothing
selected the policy stays the SFT policy and the metrics say so.
"""

from __future__ import annotations

import json
import time
from typing import cast

import jax
import numpy as np

from rewardsql_jax.distributed import barrier, is_primary
from rewardsql_jax.rewards.prm_scoring import aggregate_steps
from rewardsql_jax.rl import get_algorithm, options_dict, sample_rollouts, score_rows
from rewardsql_jax.rl.algorithm import OfflineAlgorithm
from rewardsql_jax.rl.rollouts import sampler_prompts
from rewardsql_jax.sampling.inputs import pad_id
from rewardsql_jax.training.collate import batch_indices
from rewardsql_jax.training.fit import fit

from ..context import RunContext
from ..policy import save_model
from .setup import fit_options, load_prm_scorer, new_state, prm_scores, rl_data, train_step


def candidates(ctx: RunContext, data, state) -> list[dict]:
    """Sample, execute and PRM-score the candidates once; reread them on a rerun."""
    path = ctx.stage_dir("rl") / "candidates.jsonl"
    if path.exists():
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    cfg, rl, tok, pool = ctx.config, ctx.config.rl, ctx.tokenizer(), ctx.pool()
    rng = np.random.default_rng(cfg.seed)
    idx = rng.permutation(len(data.records))[: rl.steps * rl.prompts_per_step]
    scorer = load_prm_scorer(ctx)
    t0 = time.perf_counter()

    def host_fn(records, token_ids):
        return score_rows(tok, pool, records, token_ids, clauses=False, ex_mode=cfg.data.ex_mode)

    ro = sample_rollouts(
        state.model(),
        tok,
        [data.records[i] for i in idx],
        [data.prompt_ids[i] for i in idx],
        samples=rl.samples_per_prompt,
        temperature=rl.temperature,
        max_new_tokens=rl.max_new_tokens,
        seed=cfg.seed * 100_003 + 7,
        prompts_per_call=sampler_prompts(rl),
        host_fn=host_fn,
    )
    scores = prm_scores(scorer, [r["prompt"] for r in ro.records], [c.text for c in ro.completions])
    out = []
    for r, (q, p, t, c) in enumerate(
        zip(np.repeat(idx, rl.samples_per_prompt), ro.prompt_ids, ro.token_ids, ro.completions)
    ):
        pr, orr = aggregate_steps(scores[r], "min"), float(ro.outcomes.rewards[r])
        out.append(
            {
                "question": int(q),
                "prompt_ids": p,
                "token_ids": t,
                "text": c.text,
                "step_scores": scores[r],
                "pr": pr,
                "or": orr,
                "reward": pr + orr,
            }
        )
    if is_primary():  # every process computed the same records
        path.write_text("".join(json.dumps(c) + "\n" for c in out))
    barrier("rl offline candidates")
    ctx.log(
        {
            "stage": "rl",
            "candidates": len(out),
            "candidate_seconds": time.perf_counter() - t0,
            "candidate_tokens_per_s": ro.tokens / max(ro.sample_seconds, 1e-9),
        }
    )
    return out


def run_offline(ctx: RunContext) -> dict:
    cfg, rl, out = ctx.config, ctx.config.rl, ctx.stage_dir("rl")
    # rl.run_offline: the algorithm is an offline one
    tok, data, algo = ctx.tokenizer(), rl_data(ctx), cast(OfflineAlgorithm, get_algorithm(ctx.config.rl.algorithm))
    pad = pad_id(tok)
    state = new_state(ctx)
    t0 = time.perf_counter()
    cands = candidates(ctx, data, state)
    items = algo.select(cands, rl)
    step_fn = train_step(ctx, state)
    base = {
        "algorithm": rl.algorithm,
        "algorithm_options": options_dict(algo.options(rl)),  # with the defaults
        "candidates": len(cands),
        "candidate_or_rate": _mean(cands, "or"),
        "candidate_pr_mean": _mean(cands, "pr"),
        **algo.summary(items, cands),
    }
    if not items:
        save_model(ctx, state.model(), out / "policy")
        return ctx.finish(
            "rl",
            {
                **base,
                "steps": 0,
                "seconds": time.perf_counter() - t0,
                "warning": f"nothing to train on: rl.algorithm={rl.algorithm!r} selected no "
                f"candidate (dpo: no pair with R_w > R_l; rs: none above "
                f"rl.algorithm_options.threshold): rl/policy is the SFT policy",
            },
        )

    order = list(batch_indices(len(items), rl.prompts_per_step, rl.steps, cfg.seed))  # a step's items: (seed, i)

    def step(state, i):
        idx = order[i]
        state, m = step_fn(state, algo.batch([items[j] for j in idx], length=data.length, pad_id=pad))
        m = jax.device_get(m)
        return state, {"loss": float(m["loss"]), "grad_norm": float(m["grad_norm"]), **algo.step_metrics(m)}

    run = fit(state, step, **fit_options(ctx))
    state, history = run.state, run.history
    jax.block_until_ready(state.params)
    save_model(ctx, state.model(), out / "policy")
    return ctx.finish(
        "rl",
        {
            **base,
            "steps": len(history),
            "resumed_from_step": run.resumed_from,
            "loss_curve": [(h["step"], h["loss"]) for h in history],
            "final_loss": history[-1]["loss"],
            "seconds": time.perf_counter() - t0,
        },
    )


def _mean(cands, key):
    return float(np.mean([c[key] for c in cands])) if cands else 0.0
