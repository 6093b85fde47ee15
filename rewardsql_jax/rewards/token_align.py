"""Character spans -> per-token arrays: step scores / clause rewards aligned with generated tokens.

Reward-SQL (section 5.3 and DESIGN.md) gives every token of CoCTE step j the value of step j; EXPO-SQL gives
every token of a clause that clause's reward. Both are char spans over the generated text; a fast tokenizer's
``offset_mapping`` (``tokenizer(text, return_offsets_mapping=True)``) gives each token's char span in the
same text. Assignment rule: a token takes the span it overlaps most (ties: the earlier span). A token with
an empty char span ``(p, p)`` (byte-level BPE with ``trim_offsets`` reports a lone space token that way)
takes the span containing char p, except ``(0, 0)`` after the first token, which is how tokenizers report
special tokens added by a post-processor (e.g. EOS): those, and tokens outside every span, get ``fill``.
Offsets must index the generated text itself: tokenise the response alone, or subtract the prompt length.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from ..sql.cocte import split_cocte


@dataclasses.dataclass(frozen=True)
class TokenValues:
    """Padded batch: ``values`` [B, T] float32 (``fill`` at padding) and ``mask`` [B, T] bool (real tokens)."""

    values: np.ndarray
    mask: np.ndarray


def _offsets(offsets) -> np.ndarray:
    arr = np.asarray(offsets, dtype=np.int64).reshape(-1, 2) if len(offsets) else np.zeros((0, 2), np.int64)
    if np.any(arr[:, 1] < arr[:, 0]):
        raise ValueError("offsets must be (start, end) char spans with end >= start, one per token")
    return arr


def token_span_ids(offsets, spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """Index of the span each token overlaps most (ties: earlier span), -1 for none; [T] int32.

    ``offsets``: [T, 2] (start, end) char spans of the tokens; ``spans``: [(char_start, char_end), ...].
    The ids feed ``rewards.process.steps_to_tokens`` (Reward-SQL section 5.3: step j's value on its tokens).
    """
    tok = _offsets(offsets)
    sp = np.asarray(spans, dtype=np.int64).reshape(-1, 2) if len(spans) else np.zeros((0, 2), np.int64)
    if np.any(sp[:, 1] < sp[:, 0]):
        raise ValueError("spans must be (start, end) char ranges with end >= start")
    if len(sp) == 0 or len(tok) == 0:
        return np.full(len(tok), -1, np.int32)
    overlap = np.minimum(tok[:, None, 1], sp[None, :, 1]) - np.maximum(tok[:, None, 0], sp[None, :, 0])
    best = overlap.argmax(axis=1)  # argmax returns the first maximum: earlier span on ties
    ids = np.where(overlap.max(axis=1) > 0, best, -1)
    empty = tok[:, 0] == tok[:, 1]
    empty[1:] &= tok[1:, 0] > 0  # (0, 0) after the first token: a post-processor special token
    inside = (sp[None, :, 0] <= tok[:, None, 0]) & (tok[:, None, 0] < sp[None, :, 1])
    point = np.where(inside.any(axis=1), inside.argmax(axis=1), -1)
    return np.where(empty, point, ids).astype(np.int32)


def spans_to_token_values(
    offsets, spans: Sequence[tuple[int, int, float | np.floating]], *, fill: float = 0.0
) -> np.ndarray:
    """Per-token float32 [T] array: each token gets the value of the (char_start, char_end, value) span it
    overlaps most, ``fill`` outside all spans (EXPO-SQL clause rewards, Reward-SQL step scores)."""
    ids = token_span_ids(offsets, [(s, e) for s, e, _ in spans])
    vals = np.asarray([v for _, _, v in spans], dtype=np.float32)
    out = np.full(len(ids), fill, np.float32)
    out[ids >= 0] = vals[ids[ids >= 0]]
    return out


def clause_token_values(offsets, clauses, *, fill: float = 0.0) -> np.ndarray:
    """EXPO-SQL section 3.2: every token of a clause carries its reward. ``clauses`` have ``start``, ``end``
    and ``reward`` attributes (``sql.clause_rewards(...).clauses``)."""
    return spans_to_token_values(offsets, [(c.start, c.end, c.reward) for c in clauses], fill=fill)


def cocte_step_spans(text: str) -> list[tuple[int, int]]:
    """Contiguous char segments of a CoCTE's steps plus its final query (``len(steps) + 1`` segments).

    Segment k runs from where step k starts (0 for the first, so ``WITH`` belongs to step 1) to where
    step k+1 starts, so the separating ``,\\n\\n`` belongs to the step it ends; the last CTE ends at its
    closing parenthesis and the final query's segment runs to the end of ``text``. Uses ``split_cocte``;
    raises its ValueError for unparseable text (use ``blank_line_spans`` for free-form responses).
    """
    steps = split_cocte(text).steps
    cuts = [0] + [s.start for s in steps[1:]] + ([steps[-1].end] if steps else []) + [len(text)]
    return list(zip(cuts[:-1], cuts[1:]))


def blank_line_spans(text: str, sep: str = "\n\n", *, separator: str = "end") -> list[tuple[int, int]]:
    """Segments of ``text`` split at ``sep`` (the PRM's step boundary, DESIGN.md); works for any text,
    parseable or not. ``separator``: "end" attaches each separator to the segment it ends (the paper and
    DeepSeekMath placement); "next" to the segment it starts, so segment j ends where the j-th separator
    begins (the released RewardSQL placement, ``released_step_anchors``). Separators are found left to right
    without overlap, as ``str.find`` from the end of the previous one."""
    if separator not in ("end", "next"):
        raise ValueError(f"separator={separator!r}: use 'end' (segment it ends) or 'next' (segment it starts)")
    spans, start, cut = [], 0, 0  # start: where the next search begins; cut: where the next segment begins
    while True:
        i = text.find(sep, start)
        if i < 0:
            spans.append((cut, len(text)))
            return spans
        end = i + len(sep) if separator == "end" else i
        spans.append((cut, end))
        start, cut = i + len(sep), end


def released_step_anchors(text: str, offsets, sep: str = "\n\n") -> np.ndarray:
    """[K] token index holding each "\\n\\n" block's score in the released RewardSQL code (K blocks of
    ``blank_line_spans``; -1 for a block whose score sits on no token).

    The released PRM worker (``verl/workers/fsdp_workers.py``, ``_expand_to_token_level_steps``) puts the
    j-th step score on token ``len(encode(response[:pos_j])) - 1`` (``pos_j`` = the j-th separator) and the
    last score on the last response token; the reward manager then fills each score backwards over the tokens
    up to it, so separator tokens after an anchor carry the *next* step's score. Here the anchor of block j
    (j < K-1) is the last token starting before ``pos_j``, i.e. the token holding the block's last char: the
    same token whenever ``response[:pos_j]`` re-tokenises as the sampled ids do (a BPE merge across the cut,
    sampled but not in the re-encoded prefix, would shift the released index by one; we follow the chars).
    A block ending at char 0 has no token (-1: the released code skips that score too). The last block's
    anchor is the last token (EOS included when sampled)."""
    tok = _offsets(offsets)
    if len(tok) == 0:
        return np.zeros(0, np.int64)
    ends = [e for _, e in blank_line_spans(text, sep, separator="next")[:-1]]
    anchors = [int(np.nonzero(tok[:, 0] < e)[0].max()) if np.any(tok[:, 0] < e) else -1 for e in ends]
    return np.asarray(anchors + [len(tok) - 1], np.int64)


def cocte_token_values(
    text: str, offsets, step_scores: Sequence[float], *, fill: float = 0.0, segments: str = "cocte"
) -> np.ndarray:
    """Per-token float32 [T] array of CoCTE step scores (Reward-SQL section 5.3: each token of step j
    carries s(c_j)). ``step_scores`` has one value per segment (steps + final query), or one fewer, in
    which case the final query's tokens get ``fill``. ``segments``: "cocte" (``cocte_step_spans``) or
    "blank_line" (``blank_line_spans``)."""
    if segments == "cocte":
        spans = cocte_step_spans(text)
    elif segments == "blank_line":
        spans = blank_line_spans(text)
    else:
        raise ValueError(f"segments={segments!r}: use 'cocte' or 'blank_line'")
    scores = list(np.asarray(step_scores, dtype=np.float32).reshape(-1))
    if len(scores) not in (len(spans), len(spans) - 1):
        raise ValueError(
            f"got {len(scores)} step scores for {len(spans)} segments (CTE steps + final query): "
            f"pass {len(spans)} or {len(spans) - 1}"
        )
    return spans_to_token_values(offsets, [(s, e, v) for (s, e), v in zip(spans, scores)], fill=fill)


def pad_token_arrays(rows: Sequence[np.ndarray], *, fill: float = 0.0, pad_to: int | None = None) -> TokenValues:
    """Right-pad per-response [T_i] arrays into a [B, T] float32 batch plus a bool mask of real tokens."""
    width = max((len(r) for r in rows), default=0)
    if pad_to is not None:
        if pad_to < width:
            raise ValueError(f"pad_to={pad_to} is shorter than the longest row ({width} tokens)")
        width = pad_to
    values = np.full((len(rows), width), fill, np.float32)
    mask = np.zeros((len(rows), width), bool)
    for i, r in enumerate(rows):
        values[i, : len(r)] = r
        mask[i, : len(r)] = True
    return TokenValues(values=values, mask=mask)


def batch_token_values(offsets_list, spans_list, *, fill: float = 0.0, pad_to: int | None = None) -> TokenValues:
    """Batched ``spans_to_token_values``: B responses -> padded [B, T] values and mask."""
    if len(offsets_list) != len(spans_list):
        raise ValueError(f"{len(offsets_list)} offset lists but {len(spans_list)} span lists: pass one per response")
    rows = [spans_to_token_values(o, s, fill=fill) for o, s in zip(offsets_list, spans_list)]
    return pad_token_arrays(rows, fill=fill, pad_to=pad_to)


def batch_cocte_token_values(
    texts: Sequence[str],
    offsets_list,
    scores_list,
    *,
    fill: float = 0.0,
    pad_to: int | None = None,
    segments: str = "cocte",
) -> TokenValues:
    """Batched ``cocte_token_values``: B responses -> padded [B, T] step-score values and mask."""
    if not len(texts) == len(offsets_list) == len(scores_list):
        raise ValueError(
            f"texts ({len(texts)}), offsets ({len(offsets_list)}) and scores ({len(scores_list)}) "
            "must have one entry per response"
        )
    rows = [
        cocte_token_values(t, o, s, fill=fill, segments=segments) for t, o, s in zip(texts, offsets_list, scores_list)
    ]
    return pad_token_arrays(rows, fill=fill, pad_to=pad_to)
