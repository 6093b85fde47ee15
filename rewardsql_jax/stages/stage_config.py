"""Which configuration a finished stage was made with, and a clear stop when a rerun changes it.

A finished stage is skipped on a rerun (resume). That is only right when the settings that shaped its
artefacts are the same: ``sft.steps`` changed since the SFT stage ran means ``sft/policy`` is not the policy the
config asks for, nor is anything trained from it. So each stage records, when it finishes, the config keys its
artefacts depend on (its own section plus every earlier stage's: a stage is built on their artefacts), and a
rerun whose config differs in one of them stops before running anything, naming the keys and the two ways on:
redo the stage (delete its folder and the later stages'), or keep the artefacts (``resume=accept_changes``).
Keys that change how a run executes but not what it produces (workers, memory check, checkpoint cadence,
micro-batches, rematerialisation, the stop hook, the run's name and directory) are not part of it.
"""

from __future__ import annotations

import dataclasses

from rewardsql_jax.rl import get_algorithm, options_dict

from .run_config import STAGES

# config keys (dotted prefixes) each stage's artefacts depend on, beyond those of the stages before it
STAGE_KEYS = {
    "cold_start": ("seed", "data", "model.path", "model.tokenizer_path", "model.vocab_size"),
    "sft": ("model", "sft"),
    "prm_labels": ("prm_labels",),
    "prm": ("prm",),
    "rl": ("rl",),
    "inference": ("inference",),
    "evaluate": (),
}
NOT_RESULTS = (
    "rl.stop_after",
    "rl.checkpoint_every",
    "sft.checkpoint_every",
    "prm.checkpoint_every",
    "sft.micro_batches",  # exact accumulation and recomputed layers: the same loss and gradients
    "sft.length_buckets",  # masked padding: the same loss and gradients
    "prm.micro_batches",
    "model.remat",
    "model.scan_layers",  # the same layers, run as a loop: the same results up to fp32 summation order
)


def flat(config) -> dict:
    """``{"sft.steps": 300, ...}`` of a (nested) config dataclass."""
    out = {}

    def walk(obj, prefix):
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                walk(value, f"{prefix}{f.name}.")
            else:
                out[f"{prefix}{f.name}"] = list(value) if isinstance(value, tuple) else value

    walk(config, "")
    return out


def settings(config) -> dict:
    """``flat(config)`` with ``rl.algorithm_options`` as the algorithm's options, one key each with the defaults
    filled in (``rl.algorithm_options.rm_coef``): giving a default explicitly changes nothing, and a changed
    option is named. Options the algorithm does not have (refused when the RL stage runs) stay one dict."""
    out = flat(config)
    try:
        options = options_dict(get_algorithm(config.rl.algorithm).options(config.rl))
    except ValueError:
        return out
    del out["rl.algorithm_options"]
    out.update({f"rl.algorithm_options.{k}": list(v) if isinstance(v, tuple) else v for k, v in options.items()})
    return out


def stage_settings(
    config, stage: str, *, stages=STAGES, stage_keys=STAGE_KEYS, not_results: tuple = NOT_RESULTS
) -> dict:
    """The config keys ``stage``'s artefacts depend on (its own and every earlier stage's), with their values.
    ``stages`` / ``stage_keys`` / ``not_results``: another pipeline's (SQLConductor's, ``conductor.context``)."""
    prefixes = [p for s in stages[: stages.index(stage) + 1] for p in stage_keys[s]]
    return {
        k: v
        for k, v in settings(config).items()
        if any(k == p or k.startswith(p + ".") for p in prefixes) and k not in not_results
    }


def _upgraded(recorded: dict, config) -> dict:
    """``recorded`` with the keys an earlier version recorded for settings that are now the algorithm's options
    (``rl.rm_coef`` -> ``rl.algorithm_options.rm_coef``), so a rerun still sees them change."""
    moved = get_algorithm(config.rl.algorithm).moved_settings
    renamed = {f"rl.algorithm_options.{o}": recorded[f"rl.{f}"] for f, o in moved.items() if f"rl.{f}" in recorded}
    return {**renamed, **recorded}


def changed_keys(recorded: dict, config, stage: str) -> list[str]:
    """Keys whose value in ``config`` differs from what ``stage`` recorded when it finished (keys the stage did
    not record, e.g. of an older version, are not compared)."""
    return differing(_upgraded(recorded, config), stage_settings(config, stage))


def differing(recorded: dict, now: dict) -> list[str]:
    """Keys of ``recorded`` whose value in ``now`` differs (keys ``now`` lacks are not compared)."""
    return sorted(k for k in recorded if k in now and now[k] != recorded[k])


class StageConfigChanged(ValueError):
    """A finished stage would be reused although settings its artefacts depend on changed."""


def refuse_changed(
    run_dir, stage: str, changed: list[str], recorded: dict, config, *, now: dict | None = None, stages=STAGES
) -> StageConfigChanged:
    """The error naming ``changed`` (recorded -> now). ``now`` / ``stages``: another pipeline's settings and
    stage order (SQLConductor's, ``conductor.context``); by default the Reward-SQL pipeline's, which can keep
    the artefacts with ``resume=accept_changes``."""
    keep = "; to keep its artefacts as they are, add resume=accept_changes" if now is None else ""
    if now is None:
        now, recorded = stage_settings(config, stage), _upgraded(recorded, config)
    diff = ", ".join(f"{k}: {recorded[k]!r} -> {now[k]!r}" for k in changed)
    later = list(stages[stages.index(stage) :])
    return StageConfigChanged(
        f"stage {stage!r} in {run_dir} finished with other settings ({diff}). To redo it with the new ones, delete "
        f"{', '.join(f'{run_dir}/{s}/' for s in later)} (the later stages build on it){keep}"
    )
