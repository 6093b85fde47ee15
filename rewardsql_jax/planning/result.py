"""Frozen results of AOT planning: what the compiler reports for one program, and the whole plan."""

from __future__ import annotations

import dataclasses

GB = 1e9


@dataclasses.dataclass(frozen=True)
class CompiledStats:
    """Per-device numbers of one compiled program (``compiled.memory_analysis()`` / ``cost_analysis()``).

    ``peak_bytes`` = arguments + outputs - aliased (donated) outputs + temporaries + generated code: the
    memory the program needs while it runs, on one device.
    """

    name: str
    argument_bytes: int
    output_bytes: int
    alias_bytes: int
    temp_bytes: int
    generated_code_bytes: int
    flops: float
    compile_seconds: float

    @property
    def peak_bytes(self) -> int:
        return self.argument_bytes + self.output_bytes - self.alias_bytes + self.temp_bytes + self.generated_code_bytes


@dataclasses.dataclass(frozen=True)
class Plan:
    """Per-device memory and FLOPs of an RL step (train step + sampler prefill/decode) on a mesh.

    Byte fields are per device. ``param_bytes`` / ``ref_param_bytes`` / ``opt_state_bytes`` come from the
    shard shapes of the abstract state under the rules table; ``kv_cache_bytes`` is the analytic cache
    size under the cache rules, ``kv_cache_bytes_compiled`` the cache as the compiled prefill lays it out.
    ``train`` / ``prefill`` / ``decode`` are the compiler's numbers (their ``flops`` count a loop body once:
    one micro-batch of the train step, one token of the decode loop). ``train_flops`` is the whole step per
    device (cost analysis of the unsplit step / devices), beside the analytic ``6 N tokens`` and the fuller
    estimate with the reference forward and attention matmuls. When ``compiled_layers`` is smaller
    than the model's layer count, the compiled numbers were measured at ``compiled_layers - 1`` and
    ``compiled_layers`` layers with the real shapes and extrapolated linearly (``extrapolated``).
    """

    model_name: str
    num_params: int
    num_layers: int
    mesh_shape: tuple
    platform: str
    loss: str
    prompts: int
    samples: int
    sample_rows: int
    prompt_len: int
    response_len: int
    train_seq_len: int
    micro_batches: int
    compute_dtype: str
    param_dtype: str
    param_bytes: int
    ref_param_bytes: int
    opt_state_bytes: int
    kv_cache_bytes: int
    kv_cache_bytes_compiled: int
    train: CompiledStats
    prefill: CompiledStats
    decode: CompiledStats
    train_flops: float
    analytic_flops_6nt: float
    analytic_flops_full: float
    hbm_bytes: int | None
    compiled_layers: int
    extrapolated: bool
    shared_prefix: bool = False

    @property
    def num_devices(self) -> int:
        n = 1
        for s in self.mesh_shape:
            n *= s
        return n

    @property
    def train_rows(self) -> int:
        return self.prompts * self.samples

    @property
    def micro_batch_units(self) -> int:
        """What micro-batches split: prompt groups (shared prefix) or rows."""
        return self.prompts if self.shared_prefix else self.train_rows

    @property
    def resident_while_sampling(self) -> int:
        """Train-state bytes that stay on the device while the sampler runs but are not its arguments
        (optimizer moments and reference weights; the sampler reads the policy weights themselves)."""
        return self.opt_state_bytes + self.ref_param_bytes

    @property
    def peak_bytes(self) -> int:
        """The largest per-device need of the phases of an RL step (they do not run at the same time)."""
        sampling = max(self.prefill.peak_bytes, self.decode.peak_bytes) + self.resident_while_sampling
        return max(self.train.peak_bytes, sampling)

    @property
    def fits(self) -> bool | None:
        """Whether ``peak_bytes`` fits ``hbm_bytes`` (None when no device memory was given)."""
        return None if self.hbm_bytes is None else self.peak_bytes <= self.hbm_bytes


@dataclasses.dataclass(frozen=True)
class Held:
    """One term of a stage's peak: what a device holds (``name``, e.g. "PRM scorer weights") and its bytes."""

    name: str
    bytes: int


@dataclasses.dataclass(frozen=True)
class StageMemory:
    """Peak memory per device of one pipeline stage: the largest of its phases, each the sum of what a device
    holds at once (``parts`` lists the terms of the peak phase). ``models``: every model the stage holds;
    ``mesh``: where its models live; ``advice``: what to change when it does not fit."""

    stage: str
    peak_bytes: int
    phase: str
    parts: tuple
    models: tuple
    mesh: str
    advice: str

    def fits(self, limit_bytes: int) -> bool:
        return self.peak_bytes <= limit_bytes
