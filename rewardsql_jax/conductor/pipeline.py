"""The whole SQLConductor method on the built-in benchmark (Figure 2: search-to-policy training, then inference),
as stage functions run in order by ``run_stages`` (the pipelines' stage runner, ``stages.runner.run_in_order``):

* ``setup``: built-in train/test databases and questions (with misspelt values, ``data.py``), the user's action
  checkpoints (``actions.model_path`` / ``actions.<slot>``, ``actions/models.py``), the tokenizer
* ``action_model_stage``: a small Qwen2 trained from scratch on the sub-tasks (``actions/data.py``), then frozen
  (only when some SQL-writing action has no checkpoint)
* ``search_stage``: MCTS exploration of workflows per training question + stability re-executions (Alg. 1, 2),
  reasoning augmentation (Sec. 4.3)
* ``curation_stage``: top-k stable workflows, power-normalised weights (Sec. 4.3)
* ``policy_sft_stage``: stability-weighted SFT of the policy with <results> masked (Sec. 4.4)
* ``rl_stage``: curriculum GRPO on hard questions (Sec. 4.4)
* ``evaluation_stage``: online inference (Alg. 3) of the fixed workflow and each policy
* ``report``: the EX table with evidence, calls, tokens, Figure-7-style plot, ``results.json``

Each stage writes ``run_dir/<stage>/metrics.json`` when it has finished and is skipped on a rerun, its outputs read
back (models as HF directories, searches and curated workflows as pickles, evaluation records as JSONL): a killed
run resumes at the stage it was in (``context.py``). The three trainers are ``training.fit`` runs on
``trainer_mesh(cfg.mesh)`` with ``mesh.micro_batches``, checkpointing under ``run_dir/checkpoints/<trainer>/``: the
stage a run was killed in resumes its trainer from the newest checkpoint and, every step depending on
``(seed, step)`` alone, ends with the parameters of an uninterrupted run. Per-step training metrics also go to
TensorBoard: ``tensorboard --logdir <run_dir>/tensorboard``.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import time
from pathlib import Path

from tqdm.auto import tqdm

from rewardsql_jax.models import from_pretrained, save_pretrained
from rewardsql_jax.sampling.inputs import pad_id
from rewardsql_jax.stages.runner import Stage, run_in_order
from rewardsql_jax.training.collate import encode_pair

from .actions.batching import CallBatcher
from .actions.models import chat_prompt_ids, needs_builtin
from .context import ConductorRun, builtin_action_handlers, setup, write_atomic
from .evaluation.evaluate import METHODS, evidence, run_fixed_workflow, summarize
from .evaluation.report import plot_workflow_lengths, workflow_lengths
from .search.curation import curate_question, curation_summary
from .search.explore import explore_question
from .search.reasoning import CachedReasoner, augmented_reasoning
from .training.grpo import curriculum, train_grpo
from .training.rollout import EpisodeRecord, bind, initial_state, run_policy_episodes
from .training.sft import SFTSample, new_model, train_conductor_sft
from .training.trajectory import results_mask


def run_stages(cfg, *, log=tqdm.write) -> dict:
    """Run every stage with the pipelines' stage runner (``stages.runner.run_in_order``: those a previous run
    finished are read back); writes ``run_dir/results.json``, per-episode JSONL, models, the figure, TensorBoard
    scalars (``run_dir/tensorboard/<phase>``). Returns results."""
    t_start = time.perf_counter()
    run = setup(cfg, log)
    out = run_in_order(
        conductor_stages(run), is_done=run.is_done, run_dir=run.run_dir, log=run.log, label=lambda n: f"[conductor] {n}"
    )
    return report(
        run,
        out["evaluation"],
        out["curation"],
        action_curve=out.get("action_model", []),
        total_s=time.perf_counter() - t_start,
    )


def conductor_stages(run: ConductorRun) -> list[Stage]:
    """The method's stages in order (module docstring), each with how a finished one is read back; the action
    model's only when some SQL-writing action has no checkpoint."""

    def load(stage: str, file: str):
        return lambda _earlier: pickle.loads((run.run_dir / stage / file).read_bytes())

    stages = [
        Stage("search", lambda _earlier: search_stage(run), load("search", "searches.pkl")),
        Stage("curation", lambda earlier: curation_stage(run, earlier["search"]), load("curation", "curated.pkl")),
        Stage("policy_sft", lambda earlier: policy_sft_stage(run, earlier["curation"]), _policies_load_later),
        Stage("policy_sft_rl", lambda earlier: rl_stage(run, earlier["search"]), _policies_load_later),
        Stage("evaluation", lambda _earlier: evaluation_stage(run), lambda _earlier: evaluation_stage(run)),
    ]
    if needs_builtin(run.cfg.actions):
        stages.insert(
            0, Stage("action_model", lambda _earlier: action_model_stage(run), lambda _earlier: read_action_model(run))
        )
    return stages


def _policies_load_later(_earlier) -> None:
    """A finished policy stage has no result to read back: evaluation loads the policies from their directories."""


def action_model_stage(run: ConductorRun) -> list:
    """SFT of the built-in action model (``run_dir/action_model/``); its handlers join the run's. Returns the
    loss curve."""
    cfg, tok, t = run.cfg, run.action_tok, time.perf_counter()
    action_model, curve = train_conductor_sft(
        new_model(cfg.action.shape, tok, cfg.seed),
        [SFTSample(*action_pair(tok, p, t_, chat=bool(cfg.action.shape.path))) for p, t_ in run.pairs],
        steps=cfg.action.steps,
        batch_size=cfg.action.batch_size,
        lr=cfg.action.lr,
        pad_id=pad_id(tok),
        seed=cfg.seed,
        max_len=min(cfg.action.max_train_len, cfg.action.shape.max_len),
        log=run.log,
        on_log=run.to_tensorboard("action_sft"),
        desc="action model sft",
        **run.trainer("action_sft"),
        checkpoint_every=cfg.checkpoint_every,
    )
    save_pretrained(action_model, run.run_dir / "action_model")
    run.finish("action_model", {"loss_curve": curve, "seconds": time.perf_counter() - t})
    _use_action_model(run, action_model)
    return curve


def action_pair(tok, prompt: str, target: str, *, chat: bool) -> tuple[list, list]:
    """(ids, loss mask) of one action-model SFT example: the prompt raw (a from-scratch model) or through the chat
    template as the handlers send it (``chat``: a pretrained model), the target and EOS in the loss."""
    if not chat:
        return encode_pair(tok, prompt, target)
    prompt_ids = chat_prompt_ids(tok, prompt)
    target_ids = tok(target, add_special_tokens=False).input_ids + [tok.eos_token_id]
    return prompt_ids + target_ids, [0] * len(prompt_ids) + [1] * len(target_ids)


def read_action_model(run: ConductorRun) -> list:
    """The finished action model's handlers join the run's; returns its loss curve."""
    _use_action_model(run, from_pretrained(run.run_dir / "action_model"))
    return run.metrics("action_model")["loss_curve"]


def _use_action_model(run: ConductorRun, action_model) -> None:
    handlers = builtin_action_handlers(run.cfg, run.action_tok, action_model)
    run.greedy_actions["action"], run.sampled_actions["action"] = handlers[True], handlers[False]


def search_stage(run: ConductorRun) -> list:
    """MCTS exploration of every exploration question with stability re-executions and reasoning augmentation
    (``run_dir/search/searches.pkl``: the ``QuestionSearch``es, their states without the env)."""
    out = run.run_dir / "search" / "searches.pkl"
    cfg, t = run.cfg, time.perf_counter()
    reasoner = CachedReasoner(augmented_reasoning, run.run_dir / "reasoning_cache.json")
    searches = CallBatcher(run.sampled_actions).run(
        [
            lambda call, ex=ex: explore_question(
                ex.question_id,
                bind(initial_state(ex, run.env), call),
                ex.gold_sql,
                cfg.explore,
                cfg.rl.reward,
                reasoner,
            )
            for ex in run.explore_ex
        ],
        desc="mcts exploration",
    )
    reasoner.save()
    searches = [_without_env(s) for s in searches]
    run.stage_dir("search")
    out.write_bytes(pickle.dumps(searches))
    found = sum(s.successful > 0 for s in searches)
    solved = sum(s.best_stability > 0 for s in searches)
    run.log(
        f"[conductor] exploration: {found}/{len(searches)} questions with a successful MCTS workflow, {solved} "
        f"of them reproduced on re-execution"
    )
    run.finish(
        "search",
        {"questions": len(searches), "mcts_success": found, "stable": solved, "seconds": time.perf_counter() - t},
    )
    return searches


def curation_stage(run: ConductorRun, searches) -> list:
    """Top-k stable workflows per question with power-normalised weights (``run_dir/curation/curated.jsonl`` to
    read, ``curated.pkl`` with the trajectories)."""
    out = run.run_dir / "curation" / "curated.pkl"
    p = run.cfg.policy
    curated = [
        c
        for s in searches
        for c in curate_question(s.question_id, s.scores, s.representatives, k=p.top_k, alpha=p.alpha)
    ]
    _write_curated(run.stage_dir("curation") / "curated.jsonl", curated)
    out.write_bytes(pickle.dumps(curated))
    run.log(f"[conductor] {len(curated)} curated workflows")
    run.finish("curation", {"curated_workflows": len(curated)})
    return curated


def policy_sft_stage(run: ConductorRun, curated) -> None:
    """Stability-weighted SFT of a fresh policy with <results> masked (``run_dir/policy_sft/``)."""
    cfg, tok, p, t = run.cfg, run.policy_tok, run.cfg.policy, time.perf_counter()
    samples = [SFTSample(*results_mask(tok, c.trajectory), weight=c.weight) for c in curated]
    policy, curve = new_model(p.shape, tok, cfg.seed + 1), []
    if samples:
        policy, curve = train_conductor_sft(
            policy,
            samples,
            steps=p.sft_steps,
            batch_size=p.batch_size,
            lr=p.lr,
            pad_id=pad_id(tok),
            seed=cfg.seed,
            reduction="sequence_mean",
            max_len=p.shape.max_len,
            log=run.log,
            on_log=run.to_tensorboard("policy_sft"),
            desc="policy sft",
            **run.trainer("policy_sft"),
            checkpoint_every=cfg.checkpoint_every,
        )
    else:
        run.log("[conductor] no successful workflow was explored: the SFT policy stays untrained")
    save_pretrained(policy, run.run_dir / "policy_sft")
    run.finish("policy_sft", {"loss_curve": curve, "seconds": time.perf_counter() - t})


def rl_stage(run: ConductorRun, searches) -> None:
    """Curriculum GRPO of the SFT policy on the hard exploration questions (``run_dir/policy_sft_rl/``)."""
    cfg, t = run.cfg, time.perf_counter()
    hard = curriculum(run.explore_ex, {s.question_id: s.best_stability for s in searches}, cfg.rl.hard_threshold)
    policy, history = train_grpo(
        from_pretrained(run.run_dir / "policy_sft"),
        hard,
        run.env,
        run.policy_tok,
        run.policy_server,
        run.greedy_actions,
        cfg.rl,
        cfg.rl.reward,
        max_steps=cfg.policy.max_steps,
        pad_id=pad_id(run.policy_tok),
        seed=cfg.seed,
        log=run.log,
        on_log=run.to_tensorboard("grpo"),
        **run.trainer("grpo"),
    )
    save_pretrained(policy, run.run_dir / "policy_sft_rl")
    run.finish("policy_sft_rl", {"hard_questions": len(hard), "history": history, "seconds": time.perf_counter() - t})


def evaluation_stage(run: ConductorRun) -> dict:
    """Online inference of the fixed workflow and each policy on the evaluation questions; each method's records
    in ``run_dir/evaluation/<method>.jsonl`` (a method already evaluated is read back). ``{method: records}``."""
    cfg, out = run.cfg, run.stage_dir("evaluation")
    models = {
        "untrained_policy": lambda: new_model(cfg.policy.shape, run.policy_tok, cfg.seed + 1),
        "sft_policy": lambda: from_pretrained(run.run_dir / "policy_sft"),
        "sft_rl_policy": lambda: from_pretrained(run.run_dir / "policy_sft_rl"),
    }
    records, seconds = {}, {}
    for method in METHODS:
        path = out / f"{method}.jsonl"
        if path.exists():
            records[method] = _read_records(path)
            continue
        t = time.perf_counter()
        if method == "fixed_workflow":
            recs = run_fixed_workflow(
                run.test_ex,
                run.env,
                run.tok,
                run.greedy_actions,
                cfg.fixed_workflow,
                cfg.rl.reward,
                repeats=cfg.data.eval_repeats,
                desc=f"evaluation: {method}",
            )
        else:
            recs, _ = run_policy_episodes(
                run.test_ex,
                run.env,
                run.policy_tok,
                run.policy_server(models[method]()),
                run.greedy_actions,
                max_steps=cfg.policy.max_steps,
                reward_cfg=cfg.rl.reward,
                repeats=cfg.data.eval_repeats,
                desc=f"evaluation: {method}",
            )
        seconds[method] = time.perf_counter() - t
        write_atomic(path, "".join(json.dumps(dataclasses.asdict(r), default=str) + "\n" for r in recs))
        records[method] = recs
        s = summarize(recs)
        run.log(f"[conductor] {method}: EX {s['ex']:.3f}, calls {s['mean_action_calls']:.2f}")
    if not run.is_done("evaluation"):
        run.finish("evaluation", {"seconds": seconds})
    return records


def report(run: ConductorRun, records: dict, curated: list, *, action_curve: list, total_s: float) -> dict:
    """``results.json`` (summaries, evidence, exploration, curves, timings), the figure, episodes.jsonl and the
    final TensorBoard scalars, from the stages' outputs."""
    cfg, d, run_dir = run.cfg, run.cfg.data, run.run_dir
    evaluations = {m: summarize(recs) for m, recs in records.items()}
    search, rl = run.metrics("search"), run.metrics("policy_sft_rl")
    stage_seconds = {s: run.metrics(s).get("seconds") for s in ("search", "policy_sft", "policy_sft_rl")}
    timings = {
        "action_model_sft": run.metrics("action_model")["seconds"] if run.is_done("action_model") else 0.0,
        "exploration": stage_seconds["search"],
        "policy_sft": stage_seconds["policy_sft"],
        "grpo": stage_seconds["policy_sft_rl"],
        **{f"eval_{m}": s for m, s in run.metrics("evaluation")["seconds"].items()},
    }
    figure = plot_workflow_lengths(evaluations, run_dir / "workflow_lengths.png")
    results = {
        "benchmark": (
            f"built-in benchmark, {'held-out questions of the training databases' if d.eval_on == 'heldout_questions' else 'test databases'}"
            f", value typo rate {d.value_typo_rate}"
        ),
        "eval_on": d.eval_on,
        "eval_databases": sorted({ex.db_id for ex in run.test_ex}),
        "train_databases": sorted({ex.db_id for ex in run.train_ex}),
        "action_models": run.externals.report(),
        "evaluations": evaluations,
        **evidence(records, seed=cfg.seed),
        "figure": str(figure) if figure else None,
        "workflow_lengths": workflow_lengths(records),
        "exploration": {
            "questions": search["questions"],
            "mcts_success": search["mcts_success"],
            "stable": search["stable"],
            "curated_workflows": run.metrics("curation")["curated_workflows"],
            "hard_questions": rl["hard_questions"],
        },
        "curation": curation_summary(curated),
        "action_model_loss": action_curve,
        "policy_sft_loss": run.metrics("policy_sft")["loss_curve"],
        "rl_history": rl["history"],
        "timings_s": timings,
        "total_s": total_s,
    }
    (run_dir / "results.json").write_text(json.dumps(results, indent=2, default=str))
    for method, summary in evaluations.items():  # one run per method: TensorBoard overlays them per metric
        run.scalars.write(
            f"eval/{method}",
            {k: v for k, v in summary.items() if k not in ("length_hist", "action_counts")},
            step=0,
            prefix="final/",
        )
    run.scalars.close()
    with open(run_dir / "episodes.jsonl", "w") as f:
        for method, recs in records.items():
            for r in recs:
                f.write(json.dumps({"method": method, **r.__dict__}, default=str) + "\n")
    return results


def _without_env(search):
    """A ``QuestionSearch`` whose states drop their env (action-model handles, caches: not picklable, not needed
    after the search)."""
    reps = {w: dataclasses.replace(s, env=None) for w, s in search.representatives.items()}
    return dataclasses.replace(search, representatives=reps)


def _read_records(path: Path) -> list:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [EpisodeRecord(**{**r, "workflow": tuple(r["workflow"])}) for r in rows]


def _write_curated(path: Path, curated) -> None:
    with open(path, "w") as f:
        for c in curated:
            f.write(
                json.dumps(
                    {
                        "question_id": c.question_id,
                        "workflow": c.workflow,
                        "stability": c.stability,
                        "weight": c.weight,
                        "final_sql": c.trajectory.final_sql,
                    }
                )
                + "\n"
            )
