"""What SQLConductor's stages share (``pipeline.py``), and ``setup``, which makes it: the questions, the action models' handlers, the tokenizer,
the trainers' mesh and checkpoints, and each stage's directory and done marker.

Like the Reward-SQL pipeline's stages (``stages.context.RunContext``), a stage writes its artefacts under
``run_dir/<stage>/`` and, when it has finished, ``metrics.json`` there; a stage whose ``metrics.json`` exists is
skipped on a rerun and its outputs are read back instead, so a killed run resumes at the stage it was in (and
that stage's trainer at its newest checkpoint under ``run_dir/checkpoints/``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rewardsql_jax.config import save_config
from rewardsql_jax.data.builtin.generate import make_builtin_splits
from rewardsql_jax.distributed import process_count
from rewardsql_jax.sampling.inputs import pad_id
from rewardsql_jax.stages.context import StageDirs
from rewardsql_jax.stages.policy import check_model_path
from rewardsql_jax.stages.stage_config import differing, refuse_changed, stage_settings
from rewardsql_jax.training.metrics_log import ScalarLog

from .actions.data import action_examples
from .actions.env import Completion, Env
from .actions.format import format_results, format_step
from .actions.lm import ModelServer, action_handler, action_servers
from .actions.models import ActionModels, chat_prompt_ids
from .actions.state import Candidate, State
from .data import add_value_typos, evaluation_split
from .search.explore import SEARCH_ACTIONS
from .search.reasoning import template_reasoning
from .training.mesh import trainer_mesh
from .training.tokenizer import action_tokenizer, build_tokenizer, policy_tokenizer, saved_tokenizer, stop_ids
from .training.trajectory import policy_prompt

if TYPE_CHECKING:
    from .config import ConductorRunConfig


@dataclasses.dataclass
class ConductorRun(StageDirs):
    """One run's shared state. ``greedy_actions`` / ``sampled_actions``: ``CallBatcher`` handlers of the action
    models (the built-in one joins them once its stage has run); ``log`` prints one line."""

    cfg: ConductorRunConfig
    run_dir: Path
    log: Callable
    train_ex: list
    test_ex: list
    explore_ex: list
    env: Env
    externals: ActionModels
    tok: Any  # the run's BPE: a from-scratch action model's and policy's
    policy_tok: Any  # the policy's (``tok``, or a pretrained policy's own with the tags: ``policy_tokenizer``)
    action_tok: Any  # the built-in action model's (``tok``, or a pretrained one's own: ``action_tokenizer``)
    pairs: list
    mesh: Any  # jax.sharding.Mesh, or None: one device
    scalars: ScalarLog
    greedy_actions: dict
    sampled_actions: dict

    def metrics(self, stage: str) -> dict:
        return json.loads((self.run_dir / stage / "metrics.json").read_text())

    def finish(self, stage: str, metrics: dict) -> dict:
        """Write the stage's metrics (marks it done for resume) with the settings it ran with, and return them."""
        metrics = {
            "stage": stage,
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            **metrics,
            "settings": run_settings(self.cfg, stage),
        }
        write_atomic(self.stage_dir(stage) / "metrics.json", json.dumps(metrics, indent=2, default=str))
        return metrics

    def trainer(self, name: str) -> dict:
        """The mesh, micro-batches and checkpoint directory of trainer ``name``. With several processes each
        computes the run on its own (``run.py``) and none checkpoints: Orbax saves collectively across processes,
        which these independent copies are not."""
        resumable = process_count() == 1
        return {
            "mesh": self.mesh,
            "micro_batches": self.cfg.mesh.micro_batches,
            "checkpoint_dir": self.run_dir / "checkpoints" / name if resumable else None,
        }

    def to_tensorboard(self, run: str):
        return lambda step, metrics: self.scalars.write(run, metrics, step=step)

    def policy_server(self, model, temperature: float = 0.0, seed: int = 0) -> ModelServer:
        p = self.cfg.policy
        return ModelServer(
            model,
            stop_ids=stop_ids(self.policy_tok),
            pad_id=pad_id(self.policy_tok),
            max_new_tokens=p.max_new_tokens,
            temperature=temperature,
            seed=seed,
            max_len=p.shape.max_len,
        )


# SQLConductor's stages in order (each writes run_dir/<stage>/metrics.json when it has finished)
STAGES = ("action_model", "search", "curation", "policy_sft", "policy_sft_rl", "evaluation")
# config keys (dotted prefixes) each stage's artefacts depend on, beyond those of the stages before it: a new
# policy learning rate redoes the policy's stages, not the action model's SFT or the MCTS exploration
STAGE_KEYS = {
    "action_model": ("pipeline", "seed", "data", "action", "actions", "mesh"),
    "search": ("explore", "rl.reward"),  # MCTS scores workflows with the RL reward
    "curation": ("policy.top_k", "policy.alpha"),
    "policy_sft": ("policy",),
    "policy_sft_rl": ("rl",),
    "evaluation": ("fixed_workflow",),
}
# keys that change how a run executes, not what it produces
NOT_RESULTS = ("name", "run_dir", "checkpoint_every", "rl.checkpoint_every")


def write_atomic(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all (a temporary file renamed over it): a run killed while writing a done
    marker or a read-back output leaves no truncated file for the rerun to read."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def run_settings(cfg, stage: str) -> dict:
    """The config keys ``stage``'s artefacts depend on (its ``STAGE_KEYS`` and every earlier stage's), as JSON
    stores them."""
    keys = stage_settings(cfg, stage, stages=STAGES, stage_keys=STAGE_KEYS, not_results=NOT_RESULTS)
    return json.loads(json.dumps(keys, default=str))


def check_finished_stages(cfg, run_dir: Path) -> None:
    """Before anything runs: a stage an earlier run finished with other settings stops the rerun
    (``StageConfigChanged`` naming the keys), as the Reward-SQL pipeline's ``runner.check_finished_stages``."""
    for stage in STAGES:
        marker = run_dir / stage / "metrics.json"
        if not marker.exists():
            continue
        recorded, now = json.loads(marker.read_text()).get("settings", {}), run_settings(cfg, stage)
        changed = differing(recorded, now)
        if changed:
            raise refuse_changed(run_dir, stage, changed, recorded, cfg, now=now, stages=STAGES)


def setup(cfg, log) -> ConductorRun:
    """The questions, the user's action models, the tokenizer (read back when an earlier run trained it). A rerun
    whose settings differ from those a finished stage ran with is refused (``check_finished_stages``)."""
    run_dir = Path(cfg.run_dir)
    check_finished_stages(cfg, run_dir)
    # a pretrained policy or action model that is not there stops the run here
    check_model_path(cfg.policy.shape.path, "policy.shape.path")
    check_model_path(cfg.action.shape.path, "action.shape.path")
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(cfg, run_dir / "config.json")
    d = cfg.data
    splits = make_builtin_splits(
        run_dir / "data",
        seed=cfg.seed,
        n_train_dbs=d.n_train_dbs,
        n_test_dbs=d.n_test_dbs,
        questions_per_db=d.questions_per_db,
        rl_questions_per_db=d.action_questions_per_db,
    )
    train_ex, test_ex = evaluation_split(
        splits.train.examples,
        splits.test.examples,
        eval_on=d.eval_on,
        heldout_every=d.heldout_every,
        max_eval_questions=d.max_eval_questions,
        value_typo_rate=d.value_typo_rate,
        seed=cfg.seed,
    )
    # the action model's own questions: more of the training databases', none sharing a gold SQL with any
    # train or held-out question (``make_builtin_splits``), seen by the action model only
    action_ex = list(add_value_typos(splits.rl.examples, d.value_typo_rate, cfg.seed)) if splits.rl else []
    externals = ActionModels(
        cfg.actions,
        max_new_tokens=cfg.action.max_new_tokens,
        explore_temperature=cfg.action.explore_temperature,
        temperature=cfg.action.temperature,
        seed=cfg.seed,
    )
    env = Env(complete=_unbound, routes=externals.routes)
    rng = random.Random(cfg.seed)
    pairs = [p for ex in train_ex + action_ex for p in action_examples(ex, env, rng)]
    tok_dir = run_dir / "tokenizer"
    tok = saved_tokenizer(tok_dir)
    if tok is None:
        tok = build_tokenizer(
            [p + t_ for p, t_ in pairs] + _policy_texts(train_ex), cfg.action.shape.vocab_size, tok_dir
        )
    log(
        f"[conductor] {len(train_ex)} train / {len(test_ex)} test questions (+ {len(action_ex)} for the action model "
        f"only), {len(pairs)} action-model examples, "
        f"vocab {len(tok)}"
    )
    for slot, served_by in externals.table.items():
        log(f"[conductor] {slot}: {served_by}")
    return ConductorRun(
        cfg=cfg,
        run_dir=run_dir,
        log=log,
        train_ex=train_ex,
        test_ex=test_ex,
        explore_ex=train_ex[: d.max_explore_questions] if d.max_explore_questions else train_ex,
        env=env,
        externals=externals,
        tok=tok,
        policy_tok=policy_tokenizer(cfg.policy.shape, tok, run_dir / "policy_tokenizer"),
        action_tok=action_tokenizer(cfg.action.shape, tok),
        pairs=pairs,
        mesh=trainer_mesh(cfg.mesh),
        scalars=ScalarLog(run_dir / "tensorboard"),
        greedy_actions=externals.handlers(greedy=True),
        sampled_actions=externals.handlers(greedy=False),
    )


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


def builtin_action_handlers(cfg, tok, action_model) -> dict:
    """The built-in action model's ``CallBatcher`` handlers: ``{True: evaluation / RL (action.temperature), False:
    exploration}``; a pretrained one (``action.shape.path``) reads its prompts through ``tok``'s chat template."""
    a = cfg.action
    encode = functools.partial(chat_prompt_ids, tok) if a.shape.path else None
    servers = action_servers(
        action_model,
        temperature=a.temperature,
        explore_temperature=a.explore_temperature,
        seed=cfg.seed,
        stop_ids=(tok.eos_token_id,),
        pad_id=pad_id(tok),
        max_new_tokens=a.max_new_tokens,
    )
    return {phase: action_handler(server, tok, encode=encode) for phase, server in servers.items()}
