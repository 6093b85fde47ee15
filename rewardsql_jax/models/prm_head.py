"""Reward-SQL process reward model scoring on the plain causal-LM backbone.

The PRM is the policy architecture itself: a step is scored by the probability of the " +" token
against " -" at the step-tag token " и" (DESIGN.md). Only the two unembedding columns are used, so
scoring never computes the ``[B, T, V]`` vocabulary projection.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

STEP_SEPARATOR = "\n\n"


@dataclasses.dataclass(frozen=True)
class StepTags:
    """Token ids of the step tag and of the two label tokens; unpacks as ``tag, plus, minus``."""

    tag_id: int
    plus_id: int
    minus_id: int

    def __iter__(self):
        return iter((self.tag_id, self.plus_id, self.minus_id))


@dataclasses.dataclass(frozen=True)
class TagPositions:
    """``positions [B, S]`` of the step-tag tokens per row (0-filled) and ``mask [B, S]`` of the real ones."""

    positions: np.ndarray
    mask: np.ndarray


def _single_token(tokenizer, text: str, role: str) -> int:
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) != 1:
        raise ValueError(
            f"the PRM {role} {text!r} must be exactly one token for this tokenizer, but it encodes to {list(ids)}; "
            f"pick a {role} string that is a single token in the vocabulary (Reward-SQL uses ' и', ' +', ' -')"
        )
    return int(ids[0])


def step_tag_ids(tokenizer, tag: str = " и", plus: str = " +", minus: str = " -") -> StepTags:
    """Token ids of ``tag``, ``plus`` and ``minus`` read from ``tokenizer`` (each must be one token)."""
    out = StepTags(
        _single_token(tokenizer, tag, "step tag"),
        _single_token(tokenizer, plus, "'+' label"),
        _single_token(tokenizer, minus, "'-' label"),
    )
    if out.plus_id == out.minus_id:
        raise ValueError(f"the '+' label {plus!r} and '-' label {minus!r} map to the same token id {out.plus_id}")
    return out


def format_prm_input(prompt: str, response: str, tag: str = " и") -> str:
    """PRM text: ``prompt + response`` with each step break "\\n\\n" replaced by ``tag + " "`` and ``tag`` at the end.

    The space after an inner tag keeps the tag a separate token from the next step's first word.
    Trailing blank lines of the response are dropped first so the last step gets exactly one tag.
    """
    steps = response.rstrip("\n").split(STEP_SEPARATOR)
    return prompt + (tag + " ").join(steps) + tag


def find_tag_positions(input_ids, tag_id: int, attention_mask=None, max_steps: int | None = None) -> TagPositions:
    """Host-side search for step tags: where ``input_ids == tag_id`` (and attended), left-aligned per row.

    ``max_steps`` fixes ``S`` (a static shape for jit); rows with more tags than that raise an error.
    """
    ids = np.asarray(input_ids)
    if ids.ndim != 2:
        raise ValueError(f"input_ids must be [batch, seq], got shape {ids.shape}")
    hit = ids == tag_id
    if attention_mask is not None:
        hit &= np.asarray(attention_mask).astype(bool)
    counts = hit.sum(axis=1)
    s = int(counts.max(initial=0)) if max_steps is None else max_steps
    if counts.max(initial=0) > s:
        raise ValueError(f"a row has {int(counts.max())} step tags but max_steps={s}; raise max_steps")
    positions = np.zeros((ids.shape[0], s), np.int32)
    mask = np.zeros((ids.shape[0], s), bool)
    for b in range(ids.shape[0]):
        where = np.flatnonzero(hit[b])
        positions[b, : len(where)] = where
        mask[b, : len(where)] = True
    return TagPositions(positions=positions, mask=mask)


def prm_tag_logits(model, input_ids, attention_mask, positions, plus_id: int, minus_id: int):
    """fp32 logits ``[B, S, 2]`` of (``plus_id``, ``minus_id``) at token ``positions [B, S]``.

    Equals ``model(input_ids, attention_mask)[b, positions[b, s]][[plus_id, minus_id]]`` but projects
    only the gathered hidden states onto the two unembedding columns.
    """
    return tag_logits_from_hidden(model, model.hidden_states(input_ids, attention_mask), positions, plus_id, minus_id)


def tag_logits_from_hidden(model, hidden, positions, plus_id: int, minus_id: int):
    """``prm_tag_logits`` from final hidden states ``[B, T, D]`` already computed (a shared-prefix forward)."""
    pos = jnp.asarray(positions, jnp.int32)
    if pos.ndim != 2 or pos.shape[0] != hidden.shape[0]:
        raise ValueError(f"positions must be [batch, steps] with batch {hidden.shape[0]}, got shape {pos.shape}")
    at_tags = jnp.take_along_axis(hidden, pos[..., None], axis=1)
    w = model.unembed_matrix()[:, jnp.asarray([plus_id, minus_id], jnp.int32)]
    dtype = model.config.compute_dtype
    return jnp.dot(at_tags.astype(dtype), w.astype(dtype), preferred_element_type=jnp.float32).astype(jnp.float32)


def step_scores(model, input_ids, attention_mask, positions, plus_id: int, minus_id: int):
    """Step scores ``[B, S]`` = softmax over the (" +", " -") logits at each tag, taking " +"."""
    logits = prm_tag_logits(model, input_ids, attention_mask, positions, plus_id, minus_id)
    return jax.nn.softmax(logits, axis=-1)[..., 0]
