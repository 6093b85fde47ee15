"""Peak memory per device of each stage of a run, counting every model the stage holds at once.

A row per stage (``planning.StageMemory``): the largest of its phases, each phase the sum of what one device holds
then. Trained models (policy, reference, AdamW moments) live on the run's mesh; the models the sampling phases
load (the PRM scorer, the inference policies, the PRM-labelling sampler) are sharded over each process's local
devices (``planning.sampling_memory``), in the dtype the stages load them in (``model.dtype``,
``stages.policy.load_model``). Prompts are at most ``model.max_len - rl.max_new_tokens`` tokens (the run's prompt
budget, as the RL stage cuts them).

  sft         the compiled SFT train step (policy + AdamW moments + activations).
  prm_labels  SFT policy + the sampler of one call: ``sampling.inputs.PROMPTS_PER_CALL`` prompts (prompt + a prefix
              of up to ``prm_labels.max_new_tokens`` tokens) x max(rollouts_per_question, completions_per_step)
              samples of ``prm_labels.max_new_tokens``.
  prm         the compiled PRM train step.
  rl          train step (compiled) | sampler of one call (compiled for the grpo plan, else analytic) with the
              train state resident | PRM scoring of ``SCORER_BATCH`` rows with the train state resident; the
              PRM scorer's weights in every phase when ``RLAlgorithm.uses_prm(rl)``.
  inference   final policy + PRM scorer + max(sampler of ``PROMPTS_PER_CALL`` prompts x ``best_of_n`` samples
              of ``inference.max_new_tokens``, PRM scoring); while the next policy loads, two policies.
"""

from __future__ import annotations

from pathlib import Path

from rewardsql_jax.rewards.prm_scoring import SCORER_BATCH, SCORER_LENGTH_MULTIPLE
from rewardsql_jax.rl import get_algorithm
from rewardsql_jax.rl.rollouts import sampler_prompts
from rewardsql_jax.sampling.inputs import PROMPTS_PER_CALL, prompt_width

from .aot import planning_mesh
from .from_run import base_model_config_of, model_config_of
from .result import GB, Held, StageMemory
from .sampling_memory import (
    adapter_bytes,
    forward_activation_bytes,
    host_sampling_mesh,
    loaded_config,
    sampler_cache_bytes,
    weight_bytes,
)
from .train_memory import planned_by_the_rl_plan, raise_micro_batches, train_state_bytes, train_step_memory

ROW_STAGES = ("sft", "prm_labels", "prm", "rl", "inference")
MORE_HOSTS = "hosts with more local devices (the sampling models shard over one host's devices)"


def prompt_budget(config) -> int:
    """Longest prompt the sampling phases plan for: ``model.max_len - rl.max_new_tokens`` (at least 1)."""
    return max(config.model.max_len - config.rl.max_new_tokens, 1)


class _Counter:
    """Shared pieces of one run's rows: the model configs, the local mesh, the weights on it."""

    def __init__(self, config, devices, local_devices: int):
        self.config, self.devices = config, devices
        self.train_cfg = model_config_of(config)  # fp32 master weights (LoRA: + adapters), compute model.dtype
        # what the sampling stages load: the saved (merged) checkpoints, no adapters
        self.loaded_cfg = loaded_config(base_model_config_of(config), config.model.dtype)
        self.local = host_sampling_mesh(local_devices, None if isinstance(devices, int) else devices)
        self.local_devices = local_devices
        self.weights = weight_bytes(self.loaded_cfg, self.local)
        self.where = f"local mesh of {local_devices} device(s)"
        # LoRA in one process: the RL stage's PRM is its adapters over the policy's base (stages.rl.setup)
        total = devices if isinstance(devices, int) else len(devices)
        self.prm_over_policy_base = config.model.lora.enabled and local_devices >= total

    def prm_adapters(self) -> int:
        """Bytes per device of the PRM's adapters over the policy's base, on the run mesh."""
        m = self.config.mesh
        return adapter_bytes(self.train_cfg, planning_mesh((m.data, m.fsdp, m.tensor), self.devices))

    def sampler(self, prompts, samples, prompt_len, new_tokens, mesh=None, cfg=None) -> tuple[Held, Held]:
        mesh, cfg = mesh or self.local, cfg or self.loaded_cfg
        cache = sampler_cache_bytes(
            cfg, mesh, prompts=prompts, samples=samples, prompt_len=prompt_len, new_tokens=new_tokens
        )
        act = forward_activation_bytes(cfg, rows=prompts, seq=prompt_width(prompt_len), logits_rows=prompts * samples)
        return (
            Held(f"KV cache ({prompts} prompts x {samples} samples, {prompt_len}+{new_tokens} tokens)", cache),
            Held("prefill activations", act),
        )

    def scoring(self, response_tokens: int) -> Held:
        seq = -(-(prompt_budget(self.config) + response_tokens + 1) // SCORER_LENGTH_MULTIPLE) * SCORER_LENGTH_MULTIPLE
        act = forward_activation_bytes(self.loaded_cfg, rows=SCORER_BATCH, seq=seq)
        return Held(f"PRM scoring activations ({SCORER_BATCH} rows x {seq})", act)


def _row(stage, phases: dict, models, mesh, advice) -> StageMemory:
    """The row of ``stage`` from ``{phase: [Held, ...]}``: its peak phase and that phase's terms."""
    totals = {name: sum(h.bytes for h in parts) for name, parts in phases.items()}
    worst = max(totals, key=totals.__getitem__)
    return StageMemory(stage, totals[worst], worst, tuple(phases[worst]), tuple(models), mesh, advice)


def _train_row(c: _Counter, stage: str, compile_layers) -> StageMemory:
    step = train_step_memory(c.config, stage, c.devices, compile_layers=compile_layers)
    model = "policy" if stage == "sft" else "PRM"
    m = c.config.mesh
    return _row(
        stage,
        {step.what.split(" (")[0]: [Held(step.what, step.stats.peak_bytes)]},
        (
            f"{model} base + LoRA adapters, AdamW moments of the adapters, activations"
            if c.config.model.lora.enabled
            else f"{model} (fp32) + AdamW moments + activations",
        ),
        f"run mesh {m.data}x{m.fsdp}x{m.tensor}",
        f"{raise_micro_batches(c.config, stage)}, set model.remat=true, lower {step.knob}, shard wider, or lower "
        f"model.max_len",
    )


def _prm_labels_row(c: _Counter) -> StageMemory:
    p = c.config.prm_labels
    samples = max(p.rollouts_per_question, p.completions_per_step)
    prompt = prompt_budget(c.config) + p.max_new_tokens  # the prompt + a prefix of a rollout
    parts = [Held("SFT policy weights", c.weights), *c.sampler(PROMPTS_PER_CALL, samples, prompt, p.max_new_tokens)]
    return _row(
        "prm_labels",
        {"sampler": parts},
        ("SFT policy", "sampler KV cache"),
        c.where,
        f"lower prm_labels.completions_per_step / rollouts_per_question or prm_labels.max_new_tokens, or {MORE_HOSTS}",
    )


def _rl_row(c: _Counter, rl_plan, compile_layers) -> StageMemory:
    cfg, rl = c.config, c.config.rl
    algorithm = get_algorithm(rl.algorithm)
    scorer = []
    if algorithm.uses_prm(rl):
        scorer = [
            Held("PRM adapters over the policy's base", c.prm_adapters())
            if c.prm_over_policy_base
            else Held("PRM scorer weights", c.weights)
        ]
    if rl_plan is None and planned_by_the_rl_plan(cfg):
        from rewardsql_jax.planning import plan_from_run_config

        rl_plan = plan_from_run_config(cfg, devices=c.devices, compile_layers=compile_layers)
    if rl_plan is not None:
        params, ref, opt = rl_plan.param_bytes, rl_plan.ref_param_bytes, rl_plan.opt_state_bytes
        phases = {
            "train step": [Held("train step (compiled)", rl_plan.train.peak_bytes)],
            "sampler": [
                Held(
                    f"sampler (compiled, {rl_plan.sample_rows} rows) + policy weights",
                    max(rl_plan.prefill.peak_bytes, rl_plan.decode.peak_bytes),
                ),
                Held("reference + AdamW moments", ref + opt),
            ],
        }
    else:
        step = train_step_memory(cfg, "rl", c.devices, compile_layers=compile_layers)
        params, ref, opt = train_state_bytes(cfg, c.devices)
        phases = {"train step": [Held(step.what, step.stats.peak_bytes)]}
        if algorithm.online:
            m = cfg.mesh
            mesh = planning_mesh((m.data, m.fsdp, m.tensor), c.devices)
            phases["sampler"] = [
                Held("policy + reference + AdamW moments", params + ref + opt),
                *c.sampler(sampler_prompts(rl), rl.samples_per_prompt, prompt_budget(cfg), rl.max_new_tokens, mesh),
            ]
    for parts in phases.values():
        parts.extend(scorer)
    if scorer:
        phases["PRM scoring"] = [
            Held("policy + reference + AdamW moments", params + ref + opt),
            *scorer,
            c.scoring(rl.max_new_tokens),
        ]
    m = cfg.mesh
    models = ["policy", "reference", "AdamW moments"]
    models += ["sampler KV cache"] if "sampler" in phases else []
    if scorer:
        models += ["PRM adapters (over the policy's base)" if c.prm_over_policy_base else "PRM scorer (local)"]
    advice = (
        f"raise mesh.micro_batches (now {m.micro_batches}), lower rl.prompts_per_sampler_call / rl.max_new_tokens, "
        f"shard wider, or lower model.max_len"
    )
    if scorer and not c.prm_over_policy_base:
        advice += (
            f"; the PRM scorer holds {c.weights / GB:.2f} GB per device: {MORE_HOSTS}, or an algorithm without a PRM"
        )
    prm_where = "the run mesh" if c.prm_over_policy_base else c.where
    return _row("rl", phases, models, f"run mesh {m.data}x{m.fsdp}x{m.tensor}; PRM on {prm_where}", advice)


def _exists(config, *parts) -> bool:
    return (Path(config.run_dir).joinpath(*parts) / "config.json").exists()


def _inference_row(c: _Counter) -> StageMemory:
    cfg, inf = c.config, c.config.inference
    prm = "prm" in cfg.stages or _exists(cfg, "prm", "model")
    two_policies = ("rl" in cfg.stages or _exists(cfg, "rl", "policy")) and (
        "sft" in cfg.stages or _exists(cfg, "sft", "policy")
    )
    policy = Held("policy weights", c.weights)
    held = [policy] + ([Held("PRM scorer weights", c.weights)] if prm else [])
    phases = {
        "sampler": [*held, *c.sampler(PROMPTS_PER_CALL, max(inf.best_of_n, 1), prompt_budget(cfg), inf.max_new_tokens)]
    }
    if prm:
        phases["PRM scoring"] = [*held, c.scoring(inf.max_new_tokens)]
    if two_policies:
        phases["policy swap"] = [policy, Held("next policy weights", c.weights)]
    models = ["policy"] + (["PRM scorer"] if prm else []) + ["sampler KV cache"]
    return _row(
        "inference",
        phases,
        models,
        c.where,
        f"lower inference.best_of_n (now {inf.best_of_n}) or inference.max_new_tokens (now {inf.max_new_tokens}), "
        f"or {MORE_HOSTS}",
    )


def stage_rows(
    config, stages, devices, local_devices: int, *, compile_layers: int | None = None, rl_plan=None
) -> list[StageMemory]:
    """A ``StageMemory`` per stage of ``stages`` that holds models on the devices (sft, prm_labels, prm, rl,
    inference), in pipeline order. ``devices``: the run's devices or a count (simulated); ``local_devices``: the
    devices of one process; ``rl_plan``: an already computed ``planning.Plan`` of the RL stage (not recompiled)."""
    c = _Counter(config, devices, local_devices)
    rows = []
    for stage in (s for s in ROW_STAGES if s in stages):
        if stage in ("sft", "prm"):
            rows.append(_train_row(c, stage, compile_layers))
        elif stage == "prm_labels":
            rows.append(_prm_labels_row(c))
        elif stage == "rl":
            rows.append(_rl_row(c, rl_plan, compile_layers))
        elif not config.inference.predictions_file:
            rows.append(_inference_row(c))
    return rows


def plan_stages(config, options: dict, *, log=print) -> list[StageMemory]:
    """``plan=true``: the RL plan (when ``planning`` covers the algorithm) and a row per stage of the run on
    simulated devices, printed (and appended to ``plan.out``); returns the rows."""
    import time

    from rewardsql_jax.planning.launch import plan_devices, plan_hbm_gb, plan_local_devices, run_plan
    from rewardsql_jax.planning.report import format_stage_table

    n = plan_devices(config, options)
    local = plan_local_devices(options, n)
    layers = int(options["compile_layers"]) if options.get("compile_layers") else None
    t0 = time.perf_counter()
    rl_plan = run_plan(config, options) if "rl" in config.stages and planned_by_the_rl_plan(config) else None
    rows = stage_rows(config, config.stages, n, local, compile_layers=layers, rl_plan=rl_plan)
    hbm = plan_hbm_gb(options)
    hbm_bytes = int(hbm * 1e9) if hbm else None
    text = (
        f"\nstages of {config.name}: peak per device on {n} devices ({local} per host), "
        f"{time.perf_counter() - t0:.0f} s to plan\n" + format_stage_table(rows, hbm_bytes, options.get("hbm", ""))
    )
    for row in rows:
        if hbm_bytes and not row.fits(hbm_bytes):
            text += f"\n{row.stage} does not fit: {row.phase} needs {row.peak_bytes / GB:.2f} GB. To fit: {row.advice}."
    log(text)
    if options.get("out"):
        with open(options["out"], "a") as fh:
            fh.write(text + "\n")
    return rows
