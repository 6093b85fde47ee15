"""Batches the train step consumes: pytrees of [B, ...] arrays with shape checks that name the field at fault.

Token-aligned convention: every per-token field is aligned with ``input_ids`` (position t describes token t),
so ``completion_mask[b, t] = 1`` marks a generated token and ``old_logprobs[b, t]`` is its sampling log-prob.
Position 0 never carries a loss (nothing predicts the first token).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from flax import struct


def _shape(x):
    return tuple(np.shape(x))


class _Checks:
    """Field checks shared by the batch classes (``validate`` raises ValueError naming the field)."""

    if TYPE_CHECKING:  # what the batch dataclasses using these checks have
        __dataclass_fields__: ClassVar[dict[str, Any]]
        input_ids: Any
        prompt_mask: Any  # the grouped batches'

    def _need(self, name: str, rank: int, what: str):
        x = getattr(self, name)
        if x is None:
            raise ValueError(f"{type(self).__name__}.{name} is missing; it must be {what}.")
        if len(_shape(x)) != rank:
            raise ValueError(f"{type(self).__name__}.{name} must be {what}, got shape {_shape(x)}.")
        return _shape(x)

    def _match(self, ref: str, names, *, optional=False):
        ref_shape = _shape(getattr(self, ref))
        for name in names:
            x = getattr(self, name)
            if x is None:
                if optional:
                    continue
                raise ValueError(f"{type(self).__name__}.{name} is missing; it must have shape {ref_shape} like {ref}.")
            shape = _shape(x)
            if shape != ref_shape:
                raise ValueError(
                    f"{type(self).__name__}.{name} has shape {shape} but {ref} has shape {ref_shape}; "
                    f"pad every field of the batch to the same [batch, seq] shape."
                )

    def _per_row(self, name: str, what: str):
        x, rows = getattr(self, name), _shape(self.input_ids)[:1]
        if x is not None and _shape(x) != rows:
            raise ValueError(f"{type(self).__name__}.{name} must have shape {rows} ({what}), got {_shape(x)}.")

    def _integer(self, name: str):
        x = getattr(self, name)
        dtype = x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype
        if not np.issubdtype(np.dtype(dtype), np.integer):
            raise ValueError(f"{type(self).__name__}.{name} must hold integer token ids/positions, got dtype {dtype}.")

    def _grouped_prefix(self) -> tuple[int, ...]:
        """Checks of a grouped batch's ``prompt_ids`` / ``prompt_mask`` [P, Lp] (left-padded) and
        ``completion_ids`` [P, G, Lc]; returns the completion shape."""
        name = type(self).__name__
        p, _ = self._need("prompt_ids", 2, "[groups, prefix_len] int token ids (left-padded)")
        self._integer("prompt_ids")
        self._match("prompt_ids", ["prompt_mask"])
        shape = self._need("completion_ids", 3, "[groups, group, rest_len] int token ids")
        self._integer("completion_ids")
        if shape[0] != p:
            raise ValueError(
                f"{name}.completion_ids has shape {shape} but prompt_ids has {p} groups; give [groups, group, rest_len]."
            )
        if isinstance(self.prompt_mask, np.ndarray) and p and not self.prompt_mask[:, -1].all():
            raise ValueError(
                f"{name}.prompt_mask: prefixes must be LEFT-padded (the last slot of every prefix is a real token)."
            )
        return shape

    @property
    def batch_size(self) -> int:
        """Number of rows (sequences or preference pairs)."""
        first = next(f for f in self.__dataclass_fields__ if getattr(self, f) is not None)
        return _shape(getattr(self, first))[0]


@struct.dataclass
class SFTBatch(_Checks):
    """Supervised batch: ``loss_mask`` is 1 on the target tokens (e.g. the SQL), 0 on prompt and padding.

    ``weights`` [B] optionally scales each sequence's loss (SQLConductor stability-weighted SFT).
    """

    input_ids: Any
    attention_mask: Any
    loss_mask: Any
    weights: Any = None

    def validate(self) -> SFTBatch:
        """Raise ValueError naming the first malformed field; return self."""
        self._need("input_ids", 2, "[batch, seq] int token ids")
        self._integer("input_ids")
        self._match("input_ids", ["attention_mask", "loss_mask"])
        self._per_row("weights", "one per sequence")
        return self


@struct.dataclass
class GroupedSFTBatch(_Checks):
    """``SFTBatch`` for groups of rows that share a prompt prefix (e.g. one database's schema), the prefix
    stored (and computed) once per group.

    ``prompt_ids``/``prompt_mask`` [P, Lp] hold each group's shared prefix, LEFT-padded; ``completion_ids``
    [P, G, Lc] the rest of each row (its own prompt tokens, then the target), right-padded; ``loss_mask``
    [P, G, Lc] is 1 on target tokens, aligned with ``completion_ids`` (``[p, g, t]`` describes token t of
    row g's continuation); ``weights`` [P, G] optionally scale each row. The train step computes the same
    loss and gradients as on the equivalent ``SFTBatch`` rows (``models.shared_prefix``); micro-batches split
    whole groups, so ``batch_size`` counts groups.
    """

    prompt_ids: Any
    prompt_mask: Any
    completion_ids: Any
    loss_mask: Any
    weights: Any = None

    def validate(self) -> GroupedSFTBatch:
        """Raise ValueError naming the first malformed field; return self."""
        shape = self._grouped_prefix()
        self._match("completion_ids", ["loss_mask"])
        if self.weights is not None and _shape(self.weights) != shape[:2]:
            raise ValueError(f"GroupedSFTBatch.weights must have shape {shape[:2]}, got {_shape(self.weights)}.")
        return self


@struct.dataclass
class RSBatch(_Checks):
    """Rejection-sampling batch (Reward-SQL Sec. 5.2): all N candidates of the prompts with their rewards [B];
    the ``rs`` loss keeps the candidates whose reward exceeds its threshold (the batch keeps one shape)."""

    input_ids: Any
    attention_mask: Any
    loss_mask: Any
    rewards: Any

    def validate(self) -> RSBatch:
        """Raise ValueError naming the first malformed field; return self."""
        self._need("input_ids", 2, "[batch, seq] int token ids")
        self._integer("input_ids")
        self._match("input_ids", ["attention_mask", "loss_mask"])
        if self.rewards is None:
            raise ValueError("RSBatch.rewards is missing; give one reward per candidate.")
        self._per_row("rewards", "one per candidate")
        return self


@struct.dataclass
class RLBatch(_Checks):
    """Policy-gradient batch of prompt + sampled completion rows.

    ``advantages`` is [B, T] per token (process / clause rewards) or [B] per sequence (GRPO ``grpo`` loss);
    ``token_rewards`` [B, T] feeds REINFORCE++ instead. ``old_logprobs`` are the sampler's log-probs
    (None: on-policy, ratio 1). ``ref_logprobs`` None means the step computes them from the state's reference
    params when the loss needs them.
    """

    input_ids: Any
    attention_mask: Any
    completion_mask: Any
    old_logprobs: Any = None
    advantages: Any = None
    ref_logprobs: Any = None
    token_rewards: Any = None

    def validate(self) -> RLBatch:
        """Raise ValueError naming the first malformed field; return self."""
        self._need("input_ids", 2, "[batch, seq] int token ids")
        self._integer("input_ids")
        self._match("input_ids", ["attention_mask", "completion_mask"])
        self._match("input_ids", ["old_logprobs", "ref_logprobs", "token_rewards"], optional=True)
        if self.advantages is not None:
            b, t = _shape(self.input_ids)
            if _shape(self.advantages) not in ((b,), (b, t)):
                raise ValueError(
                    f"RLBatch.advantages has shape {_shape(self.advantages)}; it must be [{b}] "
                    f"(per sequence) or [{b}, {t}] (per token) to match input_ids {(b, t)}."
                )
        return self


@struct.dataclass
class GroupedRLBatch(_Checks):
    """``RLBatch`` for groups of completions that share a prompt, each prompt stored (and computed) once.

    ``prompt_ids``/``prompt_mask`` [P, Lp] are LEFT-padded; ``completion_ids``/``completion_mask`` [P, G, Lc]
    right-padded, completion-aligned: ``[p, g, t]`` is token t of sample g of prompt p. ``old_logprobs``,
    ``ref_logprobs``, ``token_rewards`` [P, G, Lc]; ``advantages`` [P, G] (per sequence) or [P, G, Lc]. The
    train step computes the same loss and gradients as on the equivalent ``RLBatch`` rows
    (``models.shared_prefix``); micro-batches split whole groups, so ``batch_size`` counts prompts.
    """

    prompt_ids: Any
    prompt_mask: Any
    completion_ids: Any
    completion_mask: Any
    old_logprobs: Any = None
    advantages: Any = None
    ref_logprobs: Any = None
    token_rewards: Any = None

    def validate(self) -> GroupedRLBatch:
        """Raise ValueError naming the first malformed field; return self."""
        p, _ = self._need("prompt_ids", 2, "[prompts, prompt_len] int token ids (left-padded)")
        self._integer("prompt_ids")
        self._match("prompt_ids", ["prompt_mask"])
        shape = self._need("completion_ids", 3, "[prompts, group, completion_len] int token ids")
        self._integer("completion_ids")
        if shape[0] != p:
            raise ValueError(
                f"GroupedRLBatch.completion_ids has shape {shape} but prompt_ids has {p} prompts; "
                f"give [prompts, group, completion_len]."
            )
        self._match("completion_ids", ["completion_mask"])
        self._match("completion_ids", ["old_logprobs", "ref_logprobs", "token_rewards"], optional=True)
        if isinstance(self.prompt_mask, np.ndarray) and p and not np.asarray(self.prompt_mask)[:, -1].all():
            raise ValueError(
                "GroupedRLBatch.prompt_mask: prompts must be LEFT-padded (the last slot of every "
                "prompt is a real token)."
            )
        if self.advantages is not None and _shape(self.advantages) not in (shape[:2], shape):
            raise ValueError(
                f"GroupedRLBatch.advantages has shape {_shape(self.advantages)}; it must be "
                f"{list(shape[:2])} (per sequence) or {list(shape)} (per token)."
            )
        return self

    @property
    def group_size(self) -> int:
        return _shape(self.completion_ids)[1]


@struct.dataclass
class PreferenceBatch(_Checks):
    """Chosen / rejected completions of the same prompts, padded to one [B, T]; loss masks cover completions.

    ``ref_chosen_logps`` / ``ref_rejected_logps`` [B] are precomputed reference log-probs (None: computed from
    the state's reference params inside the step).
    """

    chosen_input_ids: Any
    chosen_attention_mask: Any
    chosen_loss_mask: Any
    rejected_input_ids: Any
    rejected_attention_mask: Any
    rejected_loss_mask: Any
    ref_chosen_logps: Any = None
    ref_rejected_logps: Any = None

    def validate(self) -> PreferenceBatch:
        """Raise ValueError naming the first malformed field; return self."""
        self._need("chosen_input_ids", 2, "[batch, seq] int token ids")
        self._integer("chosen_input_ids")
        self._integer("rejected_input_ids")
        self._match(
            "chosen_input_ids",
            [
                "chosen_attention_mask",
                "chosen_loss_mask",
                "rejected_input_ids",
                "rejected_attention_mask",
                "rejected_loss_mask",
            ],
        )
        b = _shape(self.chosen_input_ids)[0]
        for name in ("ref_chosen_logps", "ref_rejected_logps"):
            x = getattr(self, name)
            if x is not None and _shape(x) != (b,):
                raise ValueError(
                    f"PreferenceBatch.{name} must have shape ({b},) (summed log-probs per pair), got {_shape(x)}."
                )
        if (self.ref_chosen_logps is None) != (self.ref_rejected_logps is None):
            raise ValueError("PreferenceBatch: give both ref_chosen_logps and ref_rejected_logps, or neither.")
        return self


@struct.dataclass
class PRMBatch(_Checks):
    """PRM batch: ``tag_positions`` [B, S] index the step-tag tokens in ``input_ids``; ``labels`` [B, S] are
    0/1 step labels and ``step_mask`` [B, S] marks real steps (padding steps may point at any position)."""

    input_ids: Any
    attention_mask: Any
    tag_positions: Any
    labels: Any
    step_mask: Any

    def validate(self) -> PRMBatch:
        """Raise ValueError naming the first malformed field; return self."""
        self._need("input_ids", 2, "[batch, seq] int token ids")
        self._integer("input_ids")
        self._match("input_ids", ["attention_mask"])
        b, t = _shape(self.input_ids)
        s = self._need("tag_positions", 2, f"[{b}, num_steps] int positions of the step tags")
        if s[0] != b:
            raise ValueError(f"PRMBatch.tag_positions has shape {s}; its first dimension must be the batch size {b}.")
        self._integer("tag_positions")
        self._match("tag_positions", ["labels", "step_mask"])
        if not isinstance(self.tag_positions, np.ndarray):
            return self
        pos = np.asarray(self.tag_positions)
        if pos.size and (pos.min() < 0 or pos.max() >= t):
            raise ValueError(
                f"PRMBatch.tag_positions must lie in [0, {t}) (sequence length), "
                f"got values in [{pos.min()}, {pos.max()}]."
            )
        return self


@struct.dataclass
class GroupedPRMBatch(_Checks):
    """``PRMBatch`` for groups of rows that share a prompt prefix (one database's schema), the prefix stored (and
    computed) once per group, as ``GroupedSFTBatch`` does for SFT.

    ``prompt_ids``/``prompt_mask`` [P, Lp] hold each group's shared prefix, LEFT-padded; ``completion_ids``
    [P, G, Lc] the rest of each row, right-padded, with at least one slot after its last token;
    ``tag_positions`` [P, G, S] index the step tags in ``completion_ids`` (``[p, g, s]``: tag s of row g);
    ``labels`` / ``step_mask`` [P, G, S] as in ``PRMBatch``. The train step computes the same loss and gradients
    as on the equivalent ``PRMBatch`` rows; micro-batches split whole groups.
    """

    prompt_ids: Any
    prompt_mask: Any
    completion_ids: Any
    tag_positions: Any
    labels: Any
    step_mask: Any

    def validate(self) -> GroupedPRMBatch:
        """Raise ValueError naming the first malformed field; return self."""
        shape = self._grouped_prefix()
        s = self._need("tag_positions", 3, "[groups, group, num_steps] int positions of the step tags")
        if s[:2] != shape[:2]:
            raise ValueError(f"GroupedPRMBatch.tag_positions has shape {s}; it must start with {shape[:2]}.")
        self._integer("tag_positions")
        self._match("tag_positions", ["labels", "step_mask"])
        if isinstance(self.tag_positions, np.ndarray) and self.tag_positions.size:
            pos = np.asarray(self.tag_positions)
            if pos.min() < 0 or pos.max() >= shape[2] - 1:
                raise ValueError(
                    f"GroupedPRMBatch.tag_positions must lie in [0, {shape[2] - 1}) (a slot after the last tag), "
                    f"got values in [{pos.min()}, {pos.max()}]."
                )
        return self
