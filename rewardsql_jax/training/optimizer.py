"""AdamW with global-norm gradient clipping and a learning-rate schedule, from one frozen config."""

from __future__ import annotations

import dataclasses
import functools

import jax
import optax

SCHEDULES = ("constant", "cosine", "linear")


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """AdamW hyper-parameters (defaults: torch.optim.AdamW / HF Trainer, Reward-SQL grad clip 1.0).

    schedule:
      constant: linear warmup from 0 over ``warmup_steps`` (0 = none), then ``learning_rate``.
      cosine:   linear warmup, then cosine decay to ``learning_rate * min_lr_ratio`` at ``total_steps``.
      linear:   linear warmup, then linear decay to ``learning_rate * min_lr_ratio`` at ``total_steps``
                (HF ``get_linear_schedule_with_warmup`` when min_lr_ratio=0).
    ``decay_bias_and_norm=False`` exempts 1-D parameters (biases, RMSNorm weights) from weight decay, as the
    HF Trainer does; ``max_grad_norm=None`` disables clipping.
    """

    learning_rate: float = 1e-5
    weight_decay: float = 0.0
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    max_grad_norm: float | None = 1.0
    schedule: str = "constant"
    warmup_steps: int = 0
    total_steps: int | None = None
    min_lr_ratio: float = 0.0
    decay_bias_and_norm: bool = False

    def __post_init__(self):
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule={self.schedule!r} is not supported; choose one of {list(SCHEDULES)}.")
        if self.learning_rate < 0:
            raise ValueError(f"learning_rate must be >= 0, got {self.learning_rate}.")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}.")
        if not (0.0 <= self.b1 < 1.0 and 0.0 <= self.b2 < 1.0):
            raise ValueError(f"b1 and b2 must be in [0, 1), got b1={self.b1}, b2={self.b2}.")
        if self.eps <= 0:
            raise ValueError(f"eps must be > 0, got {self.eps}.")
        if self.max_grad_norm is not None and self.max_grad_norm <= 0:
            raise ValueError(f"max_grad_norm must be > 0 or None (no clipping), got {self.max_grad_norm}.")
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {self.warmup_steps}.")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}.")
        if self.schedule != "constant":
            if self.total_steps is None:
                raise ValueError(f"schedule={self.schedule!r} needs total_steps (the step where decay ends).")
            if self.total_steps <= self.warmup_steps:
                raise ValueError(f"total_steps ({self.total_steps}) must exceed warmup_steps ({self.warmup_steps}).")


def make_schedule(cfg: OptimizerConfig) -> optax.Schedule:
    """The learning rate as a function of the optimizer step count (0-based: the first update uses lr(0))."""
    peak, end = cfg.learning_rate, cfg.learning_rate * cfg.min_lr_ratio
    if cfg.schedule == "cosine":
        return optax.warmup_cosine_decay_schedule(0.0, peak, cfg.warmup_steps, cfg.total_steps, end)
    if cfg.schedule == "linear":
        assert cfg.total_steps is not None  # OptimizerConfig.__post_init__ requires it for a decaying schedule
        decay = optax.linear_schedule(peak, end, cfg.total_steps - cfg.warmup_steps)
    else:
        decay = optax.constant_schedule(peak)
    if cfg.warmup_steps == 0:
        return decay
    warmup = optax.linear_schedule(0.0, peak, cfg.warmup_steps)
    return optax.join_schedules([warmup, decay], [cfg.warmup_steps])


def _decay_mask(params):
    return jax.tree.map(lambda p: p.ndim >= 2, params)


@functools.lru_cache(maxsize=64)
def make_optimizer(cfg: OptimizerConfig) -> optax.GradientTransformation:
    """AdamW (decoupled decay, bias-corrected, eps outside the sqrt like torch) after global-norm clipping.

    Equal configs return the same transformation object, so a state rebuilt for a resume has the same
    static structure and reuses the compiled train step.
    """
    mask = None if cfg.decay_bias_and_norm else _decay_mask
    adamw = optax.adamw(make_schedule(cfg), b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay, mask=mask)
    if cfg.max_grad_norm is None:
        return adamw
    return optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), adamw)
