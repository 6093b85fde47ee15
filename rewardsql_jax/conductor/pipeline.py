"""The whole SQLConductor method on the built-in benchmark (Figure 2: search-to-policy training, then inference).

1. data: built-in train/test databases and questions (with misspelt values, ``data.py``)
2. action model: a small Qwen2 trained from scratch on the sub-tasks (``action_data.py``), then frozen; or the
   user's local HF checkpoints (``actions.model_path`` / ``actions.<slot>``, ``action_models.py``), which also
   link schemas and write the curated trajectories' reasoning (the built-in model is trained only when some
   SQL-writing action has no checkpoint)
3. baselines: the fixed workflow generate -> refine -> terminate, and the untrained (random) policy
4. MCTS exploration of workflows per training question + stability re-executions (Alg. 1, 2)
5. curation: top-k stable workflows, power-normalised weights, reasoning augmentation (Sec. 4.3)
6. stability-weighted SFT of the policy with <results> masked (Sec. 4.4)
7. curriculum GRPO on hard questions (Sec. 4.4)
8. online inference (Alg. 3) of each policy; EX table, calls, tokens, Figure-7-style plot

The three trainers (2, 6, 7) are ``training.fit`` runs on ``local_mesh(cfg.mesh)`` with ``mesh.micro_batches``,
checkpointing under ``run_dir/checkpoints/<trainer>/``: a rerun of a killed run resumes each from its newest
checkpoint (a finished one is restored, not retrained) and, every step depending on ``(seed, step)`` alone, ends
with the parameters of an uninterrupted run. Per-step training metrics also go to TensorBoard:
``tensorboard --logdir <run_dir>/tensorboard``.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

from tqdm.auto import tqdm

from rewardsql_jax.config import save_config
from rewardsql_jax.data.builtin import make_builtin_benchmark
from rewardsql_jax.distributed import process_count
from rewardsql_jax.models import save_pretrained
from rewardsql_jax.sampling.inputs import pad_id
from rewardsql_jax.training.collate import encode_pair
from rewardsql_jax.training.metrics_log import ScalarLog

from .actions.batching import CallBatcher
from .actions.data import action_examples
from .actions.env import Completion, Env
from .actions.format import format_results, format_step
from .actions.lm import ModelServer, action_handler
from .actions.models import ActionModels, needs_builtin
from .actions.state import Candidate, State
from .data import evaluation_split
from .evaluation.evaluate import evidence, run_fixed_workflow, summarize
from .evaluation.report import plot_workflow_lengths
from .search.curation import curate_question
from .search.explore import SEARCH_ACTIONS, explore_question
from .search.reasoning import CachedReasoner, augmented_reasoning, template_reasoning
from .training.grpo import curriculum, train_grpo
from .training.mesh import local_mesh
from .training.rollout import bind, initial_state, run_policy_episodes
from .training.sft import SFTSample, new_model, train_sft
from .training.tokenizer import build_tokenizer, stop_ids
from .training.trajectory import policy_prompt, results_mask


def _unbound(prompt: str) -> Completion:
    raise RuntimeError("the action model is called outside a batched episode; use rollout.bind(state, call)")


def _policy_texts(examples) -> list:
    """Trajectory-like strings so the tokenizer learns the policy's vocabulary (reasoning, calls, results)."""
    probes = [
        State("q", "db"),
        State("q", "db", candidates=(Candidate("s", "g", False, error="x"),), current=0),
        State("q", "db", candidates=(Candidate("s", "g", True, 0),), current=0, values=("v",)),
        State("q", "db", candidates=(Candidate("s", "g", True, 3),), current=0),
    ]
    steps = "".join(
        format_step(template_reasoning(p, a), f"{a}()") + format_results("tables: a\nok, 3 rows")
        for a in SEARCH_ACTIONS
        for p in probes
    )
    return [policy_prompt(ex.question) + steps for ex in examples[:50]] + [steps] * 20


def _servers(cfg, tok, action_model):
    pad, eos = pad_id(tok), tok.eos_token_id
    a = cfg.action
    greedy = ModelServer(action_model, stop_ids=(eos,), pad_id=pad, max_new_tokens=a.max_new_tokens, seed=cfg.seed)
    sampled = ModelServer(
        action_model,
        stop_ids=(eos,),
        pad_id=pad,
        max_new_tokens=a.max_new_tokens,
        temperature=a.explore_temperature,
        seed=cfg.seed + 7,
    )
    return greedy, sampled


def run_stages(cfg, *, log=tqdm.write) -> dict:
    """Run every step; writes ``run_dir/results.json``, per-episode JSONL, models, the figure, TensorBoard
    scalars (``run_dir/tensorboard/<phase>``). Returns results."""
    t_start = time.perf_counter()
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(cfg, run_dir / "config.json")
    d = cfg.data
    train, test = make_builtin_benchmark(
        run_dir / "data",
        seed=cfg.seed,
        n_train_dbs=d.n_train_dbs,
        n_test_dbs=d.n_test_dbs,
        questions_per_db=d.questions_per_db,
    )
    train_ex, test_ex = evaluation_split(
        train.examples,
        test.examples,
        eval_on=d.eval_on,
        heldout_every=d.heldout_every,
        max_eval_questions=d.max_eval_questions,
        value_typo_rate=d.value_typo_rate,
        seed=cfg.seed,
    )
    explore_ex = train_ex[: d.max_explore_questions] if d.max_explore_questions else train_ex
    externals = ActionModels(
        cfg.actions,
        max_new_tokens=cfg.action.max_new_tokens,
        explore_temperature=cfg.action.explore_temperature,
        seed=cfg.seed,
    )
    env = Env(complete=_unbound, routes=externals.routes)
    timings = {}
    mesh = local_mesh(cfg.mesh)
    trainers = _trainer_options(cfg, run_dir, mesh)
    scalars = ScalarLog(run_dir / "tensorboard")

    def to_tensorboard(run):
        return lambda step, metrics: scalars.write(run, metrics, step=step)

    t = time.perf_counter()
    rng = random.Random(cfg.seed)
    pairs = [p for ex in train_ex for p in action_examples(ex, env, rng)]
    tok = build_tokenizer(
        [p + t_ for p, t_ in pairs] + _policy_texts(train_ex), cfg.action.shape.vocab_size, run_dir / "tokenizer"
    )
    log(
        f"[conductor] {len(train_ex)} train / {len(test_ex)} test questions, {len(pairs)} action-model examples, "
        f"vocab {len(tok)}"
    )
    greedy_actions, sampled_actions = externals.handlers(greedy=True), externals.handlers(greedy=False)
    for slot, served_by in externals.table.items():
        log(f"[conductor] {slot}: {served_by}")
    action_curve = []
    if needs_builtin(cfg.actions):
        action_model, action_curve = train_sft(
            new_model(cfg.action.shape, tok, cfg.seed),
            [SFTSample(*encode_pair(tok, p, t_)) for p, t_ in pairs],
            steps=cfg.action.steps,
            batch_size=cfg.action.batch_size,
            lr=cfg.action.lr,
            pad_id=pad_id(tok),
            seed=cfg.seed,
            max_len=min(cfg.action.max_train_len, cfg.action.shape.max_len),
            log=log,
            on_log=to_tensorboard("action_sft"),
            desc="action model sft",
            **trainers("action_sft"),
            checkpoint_every=cfg.checkpoint_every,
        )
        save_pretrained(action_model, run_dir / "action_model")
        greedy_action, sampled_action = _servers(cfg, tok, action_model)
        greedy_actions["action"] = action_handler(greedy_action, tok)
        sampled_actions["action"] = action_handler(sampled_action, tok)
    timings["action_model_sft"] = time.perf_counter() - t
    p = cfg.policy
    pol_stop = stop_ids(tok)

    def policy_server(model, temperature=0.0, seed=0):
        return ModelServer(
            model,
            stop_ids=pol_stop,
            pad_id=pad_id(tok),
            max_new_tokens=p.max_new_tokens,
            temperature=temperature,
            seed=seed,
            max_len=p.shape.max_len,
        )

    evaluations, records = {}, {}

    def evaluate(name, model):
        t0 = time.perf_counter()
        recs, _ = run_policy_episodes(
            test_ex, env, tok, policy_server(model), greedy_actions, max_steps=p.max_steps, reward_cfg=cfg.rl.reward
        )
        evaluations[name], records[name] = summarize(recs), recs
        timings[f"eval_{name}"] = time.perf_counter() - t0
        log(f"[conductor] {name}: EX {evaluations[name]['ex']:.3f}, calls {evaluations[name]['mean_action_calls']:.2f}")

    t = time.perf_counter()
    recs = run_fixed_workflow(test_ex, env, tok, greedy_actions, cfg.fixed_workflow, cfg.rl.reward)
    evaluations["fixed_workflow"], records["fixed_workflow"] = summarize(recs), recs
    timings["eval_fixed_workflow"] = time.perf_counter() - t
    log(f"[conductor] fixed workflow {'->'.join(cfg.fixed_workflow)}: EX {evaluations['fixed_workflow']['ex']:.3f}")
    evaluate("untrained_policy", new_model(p.shape, tok, cfg.seed + 1))

    t = time.perf_counter()
    reasoner = CachedReasoner(augmented_reasoning, run_dir / "reasoning_cache.json")
    batcher = CallBatcher(sampled_actions)
    searches = batcher.run(
        [
            lambda call, ex=ex: explore_question(
                ex.question_id, bind(initial_state(ex, env), call), ex.gold_sql, cfg.explore, cfg.rl.reward, reasoner
            )
            for ex in explore_ex
        ]
    )
    reasoner.save()
    curated = [
        c
        for s in searches
        for c in curate_question(s.question_id, s.scores, s.representatives, k=p.top_k, alpha=p.alpha)
    ]
    timings["exploration"] = time.perf_counter() - t
    found = sum(s.successful > 0 for s in searches)
    solved = sum(s.best_stability > 0 for s in searches)
    log(
        f"[conductor] exploration: {found}/{len(searches)} questions with a successful MCTS workflow, {solved} "
        f"of them reproduced on re-execution; {len(curated)} curated workflows"
    )
    _write_curated(run_dir / "curated.jsonl", curated)

    t = time.perf_counter()
    samples = [SFTSample(*map(tuple, results_mask(tok, c.trajectory)), weight=c.weight) for c in curated]
    policy = new_model(p.shape, tok, cfg.seed + 1)
    if samples:
        policy, policy_curve = train_sft(
            policy,
            samples,
            steps=p.sft_steps,
            batch_size=p.batch_size,
            lr=p.lr,
            pad_id=pad_id(tok),
            seed=cfg.seed,
            reduction="sequence_mean",
            max_len=p.shape.max_len,
            log=log,
            on_log=to_tensorboard("policy_sft"),
            desc="policy sft",
            **trainers("policy_sft"),
            checkpoint_every=cfg.checkpoint_every,
        )
    else:
        policy_curve = []
        log("[conductor] no successful workflow was explored: the SFT policy stays untrained")
    save_pretrained(policy, run_dir / "policy_sft")
    timings["policy_sft"] = time.perf_counter() - t
    evaluate("sft_policy", policy)

    t = time.perf_counter()
    hard = curriculum(explore_ex, {s.question_id: s.best_stability for s in searches}, cfg.rl.hard_threshold)
    policy, rl_history = train_grpo(
        policy,
        hard,
        env,
        tok,
        policy_server,
        greedy_actions,
        cfg.rl,
        cfg.rl.reward,
        max_steps=p.max_steps,
        pad_id=pad_id(tok),
        seed=cfg.seed,
        log=log,
        on_log=to_tensorboard("grpo"),
        **trainers("grpo"),
    )
    save_pretrained(policy, run_dir / "policy_sft_rl")
    timings["grpo"] = time.perf_counter() - t
    evaluate("sft_rl_policy", policy)

    figure = plot_workflow_lengths(evaluations, run_dir / "workflow_lengths.png")
    results = {
        "benchmark": (
            f"built-in benchmark, {'held-out questions of the training databases' if d.eval_on == 'heldout_questions' else 'test databases'}"
            f", value typo rate {d.value_typo_rate}"
        ),
        "eval_on": d.eval_on,
        "eval_databases": sorted({ex.db_id for ex in test_ex}),
        "train_databases": sorted({ex.db_id for ex in train_ex}),
        "action_models": externals.report(),
        "evaluations": evaluations,
        **evidence(records, seed=cfg.seed),
        "figure": str(figure) if figure else None,
        "exploration": {
            "questions": len(searches),
            "mcts_success": found,
            "stable": solved,
            "curated_workflows": len(curated),
            "hard_questions": len(hard),
        },
        "action_model_loss": action_curve,
        "policy_sft_loss": policy_curve,
        "rl_history": rl_history,
        "timings_s": timings,
        "total_s": time.perf_counter() - t_start,
    }
    (run_dir / "results.json").write_text(json.dumps(results, indent=2, default=str))
    for method, summary in evaluations.items():  # one run per method: TensorBoard overlays them per metric
        scalars.write(
            f"eval/{method}",
            {k: v for k, v in summary.items() if k not in ("length_hist", "action_counts")},
            step=0,
            prefix="final/",
        )
    scalars.close()
    with open(run_dir / "episodes.jsonl", "w") as f:
        for method, recs in records.items():
            for r in recs:
                f.write(json.dumps({"method": method, **r.__dict__}, default=str) + "\n")
    return results


def _trainer_options(cfg, run_dir: Path, mesh):
    """``trainers(name)``: the mesh, micro-batches and checkpoint directory of trainer ``name``. With several
    processes each computes the run on its own (``run.py``) and none checkpoints: Orbax saves collectively
    across processes, which these independent copies are not."""

    def options(name: str) -> dict:
        resumable = process_count() == 1
        return {
            "mesh": mesh,
            "micro_batches": cfg.mesh.micro_batches,
            "checkpoint_dir": run_dir / "checkpoints" / name if resumable else None,
        }

    return options


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
