"""Printing a Plan as a table, and the "will it OOM" check the pipeline runs before training."""

from __future__ import annotations

import dataclasses

from .result import GB, CompiledStats, Plan

# Per-device HBM of common accelerators (vendor specifications), in GB.
HBM_GB = {"v5p": 95.0, "v5e": 16.0, "v4": 32.0, "h100": 80.0, "a100": 80.0, "h200": 141.0}
# Accelerators per host (one process each) of the usual multi-host machines: TPU VMs of v4 / v5p / v5e pod
# slices have 4 chips, GPU nodes 8.
LOCAL_DEVICES = {"v5p": 4, "v5e": 4, "v4": 4, "h100": 8, "a100": 8, "h200": 8}


def _gb(n) -> str:
    return f"{n / GB:10.2f} GB"


def _count(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.2f}M"


def _tf(x) -> str:
    return f"{x / 1e12:10.2f} TFLOP"


def _program_rows(s: CompiledStats) -> list[str]:
    return [
        f"  {s.name:<22} args {_gb(s.argument_bytes)}  out {_gb(s.output_bytes)}  aliased {_gb(s.alias_bytes)}"
        f"  temp {_gb(s.temp_bytes)}  code {_gb(s.generated_code_bytes)}  peak {_gb(s.peak_bytes)}"
        f"  compile {s.compile_seconds:6.1f} s"
    ]


def format_plan(plan: Plan) -> str:
    """A fixed-width table of the plan (per-device memory, FLOPs, fit)."""
    d, f, t = plan.mesh_shape
    lines = [
        f"AOT plan: {plan.model_name} ({_count(plan.num_params)} params, {plan.num_layers} layers), loss {plan.loss}",
        f"mesh data={d} x fsdp={f} x tensor={t} = {plan.num_devices} {plan.platform} devices (compiled for); "
        f"weights {plan.param_dtype}, compute {plan.compute_dtype}",
        (
            f"train: {plan.prompts} prompts (each computed once, shared prefix) x {plan.samples} samples, "
            f"{plan.train_seq_len} tokens per row (prompt {plan.prompt_len} + response {plan.response_len}, bucketed), "
            f"{plan.micro_batches} micro-batches of {plan.prompts // plan.micro_batches} prompt groups"
            if plan.shared_prefix
            else f"train: {plan.prompts} prompts x {plan.samples} samples = {plan.train_rows} rows x {plan.train_seq_len} "
            f"tokens (prompt {plan.prompt_len} + response {plan.response_len}, bucketed), {plan.micro_batches} "
            f"micro-batches of {plan.train_rows // plan.micro_batches} rows"
        ),
        f"sampler: {plan.sample_rows} rows per call, prompt {plan.prompt_len} + {plan.response_len} new tokens",
    ]
    if plan.extrapolated:
        k = plan.compiled_layers
        lines.append(
            f"NOTE: compiled at {k - 1} and {k} layers with the real widths and shapes; compiled numbers are "
            f"extrapolated linearly to {plan.num_layers} layers (f({k}) + (L-{k})(f({k})-f({k - 1})))."
        )
    lines += [
        "per device:",
        f"  parameters (policy)    {_gb(plan.param_bytes)}",
        f"  reference parameters   {_gb(plan.ref_param_bytes)}",
        f"  optimizer state        {_gb(plan.opt_state_bytes)}",
        f"  KV cache (analytic)    {_gb(plan.kv_cache_bytes)}   as compiled prefill lays it out {_gb(plan.kv_cache_bytes_compiled)}",
        "compiled programs (XLA memory_analysis, per device):",
        *_program_rows(plan.train),
        *_program_rows(plan.prefill),
        *_program_rows(plan.decode),
        "FLOPs per train step, per device:",
        f"  XLA cost analysis      {_tf(plan.train_flops)}",
        f"  6 N tokens             {_tf(plan.analytic_flops_6nt)}   (ratio XLA / 6NT = "
        f"{plan.train_flops / max(plan.analytic_flops_6nt, 1):.2f})",
        f"  6NT + ref fwd + attn   {_tf(plan.analytic_flops_full)}",
        f"peak per device          {_gb(plan.peak_bytes)}   (max of train step; sampler + optimizer state and "
        f"reference kept resident {_gb(plan.resident_while_sampling)})",
    ]
    if plan.hbm_bytes is not None:
        lines.append(
            f"device memory            {_gb(plan.hbm_bytes)}   -> {'FITS' if plan.fits else 'DOES NOT FIT'}"
            f" ({100 * plan.peak_bytes / plan.hbm_bytes:.0f}% of HBM)"
        )
    return "\n".join(lines)


def print_plan(plan: Plan) -> None:
    print(format_plan(plan))


@dataclasses.dataclass(frozen=True)
class FitCheck:
    """Outcome of ``check_fits``: ``ok`` and a message naming the phase that needs the most memory."""

    ok: bool
    message: str
    peak_bytes: int
    hbm_bytes: int


def check_fits(plan: Plan, hbm_gb: float | None = None) -> FitCheck:
    """Compare the plan's per-device peak with the device memory (``hbm_gb`` or the plan's own)."""
    hbm = int(hbm_gb * 1e9) if hbm_gb is not None else plan.hbm_bytes
    if hbm is None:
        raise ValueError("no device memory to compare with: pass hbm_gb (e.g. 95 for v5p, 80 for H100, 141 for H200)")
    phases = {
        "train step": plan.train.peak_bytes,
        "sampler prefill": plan.prefill.peak_bytes + plan.resident_while_sampling,
        "sampler decode": plan.decode.peak_bytes + plan.resident_while_sampling,
    }
    worst = max(phases, key=phases.__getitem__)
    peak = phases[worst]
    if peak <= hbm:
        return FitCheck(True, f"fits: peak {peak / GB:.2f} GB per device ({worst}) <= {hbm / GB:.2f} GB", peak, hbm)
    d, f, _ = plan.mesh_shape
    units = plan.micro_batch_units
    what = "prompt groups" if plan.shared_prefix else "rows"
    per_device = units // plan.micro_batches // max(d * f, 1)
    if worst == "train step" and per_device > 1:
        advice = (
            f"raise mesh.micro_batches (each micro-batch now puts {per_device} {what} on a device; up to "
            f"{units // max(d * f, 1)} micro-batches), shard wider, or shorten prompt / response"
        )
    elif worst == "train step":
        advice = (
            f"micro-batches already put one of the {what} on each device: shorten prompt / response (activation memory "
            "grows with the square of the sequence: T x T attention scores per head and layer), shard heads "
            "wider (tensor), or rematerialise activations / use a flash-attention kernel"
        )
    else:
        advice = "sample fewer prompts per sampler call, shard wider, or shorten prompt / response"
    msg = (
        f"will OOM: the {worst} needs {peak / GB:.2f} GB per device but a device has {hbm / GB:.2f} GB "
        f"(train step {plan.train.peak_bytes / GB:.2f} GB with {plan.micro_batches} micro-batch(es), temp "
        f"{plan.train.temp_bytes / GB:.2f} GB; params+optimizer+reference "
        f"{(plan.param_bytes + plan.opt_state_bytes + plan.ref_param_bytes) / GB:.2f} GB). To fit: {advice}."
    )
    return FitCheck(False, msg, peak, hbm)


def assert_fits(plan: Plan, hbm_gb: float | None = None) -> None:
    """Raise MemoryError with ``check_fits``'s message when the plan does not fit."""
    check = check_fits(plan, hbm_gb)
    if not check.ok:
        raise MemoryError(check.message)


def stage_summary(row) -> str:
    """One line of a ``StageMemory``: its peak, the peak phase and its terms, the models held."""
    terms = " + ".join(f"{p.name} {p.bytes / GB:.2f}" for p in row.parts)
    return (
        f"peak {row.peak_bytes / GB:.2f} GB per device ({row.phase}: {terms}); holds {', '.join(row.models)} "
        f"[{row.mesh}]"
    )


def format_stage_table(rows, hbm_bytes: int | None = None, slice_name: str = "") -> str:
    """A markdown table, a row per stage: peak bytes per device, the models it holds, whether it fits."""
    head = "| stage | peak GB / device | peak phase | models held (where) |" + (" fits |" if hbm_bytes else "")
    lines = [head, "|---" * (5 if hbm_bytes else 4) + "|"]
    for r in rows:
        cells = [r.stage, f"{r.peak_bytes / GB:.2f}", r.phase, f"{', '.join(r.models)} ({r.mesh})"]
        if hbm_bytes:
            pct = 100 * r.peak_bytes / hbm_bytes
            cells.append(f"{'yes' if r.fits(hbm_bytes) else 'NO'} ({pct:.0f}% of {slice_name or 'HBM'})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
