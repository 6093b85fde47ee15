"""Weighted loss adapters: run the model on a (micro-)batch and return a loss as (sum, count) for exact accumulation.

The train step splits a batch into micro-batches, sums ``total`` and ``count`` over them and divides once:
loss = sum(total) / max(sum(count), 1). Each adapter calls the registered loss (``losses.get(name)``) on its
micro-batch and rescales the mean it returns by that micro-batch's denominator, so the sum equals the
numerator of the full-batch mean exactly. The denominator follows the loss's reduction:

  tokens     sft / rs token_mean (rs: kept candidates only), grpo agg=bnpo/token_mean/dapo, reinforce_pp token_mean, prm (mean over steps)
  sequences  grpo agg=grpo, dpo, sft sequence_mean (sequences with >= 1 target token)
  fixed      grpo agg=dr_grpo: B * max_len

A batch the step padded so its rows split over the mesh (``padding``) reaches the adapters with the option
``real_rows``: the per-row loss inputs keep the real rows only (the supervised ones see masked padding rows).

Batch-global statistics are computed before splitting: REINFORCE++'s whitening runs over the whole batch in
``prepare`` (as verl whitens over the whole rollout batch), then each micro-batch sees fixed advantages.

A loss without an adapter of its own is fed by the adapter of its family (``losses.register(..., family=...)``):
``policy_gradient`` (``RLBatch`` / ``GroupedRLBatch`` with advantages), ``preference`` (``PreferenceBatch``),
``supervised`` (``SFTBatch`` / ``GroupedSFTBatch``), ``prm`` (``PRMBatch``), with the denominator its ``reduction`` names.
``register_adapter`` replaces that for a loss that needs more (batch-global statistics, extra fields).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import struct

from rewardsql_jax import losses
from rewardsql_jax.models.prm_head import prm_tag_logits
from rewardsql_jax.models.shared_prefix import shared_prefix_hidden
from rewardsql_jax.rewards.returns import reinforce_pp_returns

from .batch import GroupedRLBatch, GroupedSFTBatch, PRMBatch, PreferenceBatch, RLBatch, RSBatch, SFTBatch
from .logprobs import (
    hidden_logprobs,
    sequence_logprobs,
    sequence_logprobs_and_entropy,
    shared_prefix_logprobs,
    summed_logprobs,
)
from .vocab_head import head_logprobs, supports_fused_head

# Options the adapters consume themselves; every other loss option goes to the loss function.
ADAPTER_OPTIONS = ("temperature", "logprob_chunk_size", "tag_token_ids", "target_tokens")
# Set by the train step, not by users: the real rows of a padded micro-batch (``padding.RealRows``).
STEP_OPTION = "real_rows"


@struct.dataclass
class WeightedLoss:
    """A micro-batch's loss numerator ``total``, its denominator ``count`` and its metrics (scalars)."""

    total: jax.Array
    count: jax.Array
    metrics: dict


@dataclasses.dataclass(frozen=True)
class LossAdapter:
    """How the train step feeds one registered loss.

    weighted(model, ref_model, batch, loss_fn, options) -> WeightedLoss   (differentiated w.r.t. model)
    prepare(model, ref_model, batch, options) -> (batch, metrics)          (whole batch, no gradient; optional)
    """

    batch_type: type | tuple
    weighted: Callable
    prepare: Callable | None = None


_ADAPTERS: dict[str, LossAdapter] = {}


def register_adapter(name: str, adapter: LossAdapter, *, override: bool = False) -> LossAdapter:
    """Tell the train step how to run the loss registered as ``name``."""
    if name in _ADAPTERS and not override:
        raise ValueError(f"an adapter for loss {name!r} is already registered; pass override=True to replace it.")
    _ADAPTERS[name] = adapter
    return adapter


def get_adapter(name: str) -> LossAdapter:
    """The adapter of loss ``name``: its own (``register_adapter``) or its family's; unknown losses list the
    registered names (from ``losses.spec``)."""
    spec = losses.spec(name)
    if name in _ADAPTERS:
        return _ADAPTERS[name]
    return family_adapter(spec.family, spec.reduction, takes_reference=_takes(spec.fn, "ref_logprobs"))


def _takes(fn, argument: str) -> bool:
    try:
        return argument in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # builtins / C callables without a signature
        return False


@functools.cache
def family_adapter(family: str, reduction: str, *, takes_reference: bool = False) -> LossAdapter:
    """The adapter every loss of ``family`` without its own gets (module docstring)."""
    if family == "policy_gradient":
        fn = functools.partial(_policy_gradient, reduction=reduction, takes_reference=takes_reference)
        return LossAdapter((RLBatch, GroupedRLBatch), fn)
    if family == "preference":
        return LossAdapter(PreferenceBatch, _dpo)
    if family == "supervised":
        return LossAdapter((SFTBatch, GroupedSFTBatch), functools.partial(_supervised, reduction=reduction))
    if family == "prm":
        return LossAdapter(PRMBatch, _prm)
    raise ValueError(f"unknown loss family {family!r}; families: {list(losses.FAMILIES)}")


def _rescale(loss, count, *, floor_one: bool = True):
    """(loss * denominator, count): the micro-batch numerator, with the loss's own max(count, 1) floor."""
    count = jnp.asarray(count, jnp.float32)
    return loss * (jnp.maximum(count, 1.0) if floor_one else count), count


def _rl_logprobs(model, batch, opts, *, with_entropy: bool = False):
    """Token log-probs (and entropies) aligned with the batch's per-token fields: [B, T] for an RLBatch,
    [P, G, Lc] for a GroupedRLBatch (each prompt computed once)."""
    kw = dict(temperature=opts.get("temperature", 1.0))
    if isinstance(batch, GroupedRLBatch):
        return shared_prefix_logprobs(
            model,
            batch.prompt_ids,
            batch.prompt_mask,
            batch.completion_ids,
            chunk_size=opts.get("logprob_chunk_size"),
            with_entropy=with_entropy,
            **kw,
        )
    if with_entropy:
        return sequence_logprobs_and_entropy(model, batch.input_ids, batch.attention_mask, **kw)
    k = opts.get("target_tokens")
    if k is not None and k < batch.input_ids.shape[1] - 1:
        return _rl_target_logprobs(model, batch, opts, k)
    return sequence_logprobs(
        model, batch.input_ids, batch.attention_mask, chunk_size=opts.get("logprob_chunk_size"), **kw
    )


def _rl_target_logprobs(model, batch, opts, k):
    """``target_tokens=K`` on an RLBatch: the vocabulary projection only at each row's first K completion
    positions ([B, K, V] logits instead of [B, T, V]), as in ``_next_token_inputs``; K must bound every row's
    completion tokens. The other entries of the [B, T] result are 0 and masked out by the loss (``_grpo``
    replaces them by the old log-probs, so ratios there are 1 and finite)."""
    hidden = model.hidden_states(batch.input_ids, batch.attention_mask)[:, :-1]
    targets = jnp.asarray(batch.input_ids)[:, 1:]
    mask = jnp.asarray(batch.completion_mask, jnp.float32)[:, 1:]
    pos = jnp.argsort(-mask, axis=1, stable=True)[:, :k]
    hidden = jnp.take_along_axis(hidden, pos[..., None], axis=1)
    lp = hidden_logprobs(
        model,
        hidden,
        jnp.take_along_axis(targets, pos, axis=1),
        opts.get("temperature", 1.0),
        opts.get("logprob_chunk_size"),
    )
    rows = jnp.arange(pos.shape[0])[:, None]
    out = jnp.zeros(mask.shape, lp.dtype).at[rows, pos].set(lp)
    return jnp.pad(out, ((0, 0), (1, 0)))


def _rows(batch, x):
    """A GroupedRLBatch's [P, G, ...] arrays as rows [P * G, ...] (what the losses take); RLBatch's as they are."""
    if x is None or not isinstance(batch, GroupedRLBatch):
        return x
    return x.reshape(-1, *x.shape[2:])


def _flat(batch, *fields):
    return [_rows(batch, getattr(batch, f)) for f in fields]


def _flat_real(batch, real, *fields):
    """``_flat`` of the real rows (``real``: ``_real(own)``) of the batch's ``fields``."""
    return [_rows(batch, real(getattr(batch, f))) for f in fields]


def _no_grad_logprobs(model, batch, opts):
    return jax.lax.stop_gradient(_rl_logprobs(model, batch, opts))


def _need_ref(ref_model, loss_name, field):
    if ref_model is None:
        raise ValueError(
            f"loss {loss_name!r} needs reference log-probs: fill {field} in the batch, or keep a "
            f"frozen reference in the state (create_train_state(..., with_reference=True))."
        )


def _split(opts):
    keys = (*ADAPTER_OPTIONS, STEP_OPTION)
    own = {k: opts[k] for k in keys if k in opts}
    return own, {k: v for k, v in opts.items() if k not in keys}


def _real(own):
    """The function that keeps a per-row array's real rows (``padding.RealRows``); the identity without padding."""
    rows = own.get(STEP_OPTION)
    return (lambda x: x) if rows is None else rows.take


# ---------------------------------------------------------------- sft / rs
def _next_token_inputs(model, batch, own):
    """(logits, targets, loss mask) of next-token prediction on a batch with input_ids / attention / loss_mask
    (``_next_token_hidden`` projected onto the vocabulary)."""
    hidden, targets, mask = _next_token_hidden(model, batch, own)
    logits = model.logits_from_hidden(hidden)
    if own.get("temperature", 1.0) != 1.0:
        logits = logits / own["temperature"]
    return logits, targets, mask


def _next_token_hidden(model, batch, own):
    """(final hidden states, targets, loss mask) of next-token prediction on a batch with input_ids / attention /
    loss_mask.

    ``target_tokens=K`` (a static bound on the loss tokens of any row, e.g. the SFT stage's longest target):
    the vocabulary projection runs only at each row's first K loss positions ([B, K, V] logits instead of
    [B, T, V]); the loss, its gradient and the metrics are the same, since the other positions are masked out."""
    if isinstance(batch, GroupedSFTBatch):  # each group's shared prefix computed once; rows [P * G, Lc]
        hidden = shared_prefix_hidden(model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids)
        hidden = hidden.reshape(-1, *hidden.shape[2:])
        targets = jnp.asarray(batch.completion_ids).reshape(hidden.shape[:2])
        mask = jnp.asarray(batch.loss_mask, jnp.float32).reshape(hidden.shape[:2])
    else:
        # the last position predicts nothing: drop it before the vocab projection, not after (its [B, V]
        # slice's gradient would be padded back into a full [B, T, V] array)
        hidden = model.hidden_states(batch.input_ids, batch.attention_mask)[:, :-1]
        targets, mask = batch.input_ids[:, 1:], jnp.asarray(batch.loss_mask, jnp.float32)[:, 1:]
    k = own.get("target_tokens")
    if k is not None and k < mask.shape[1]:
        # each row's loss positions first, in order (a stable sort on -mask), then K of them
        pos = jnp.argsort(-mask, axis=1, stable=True)[:, :k]
        hidden = jnp.take_along_axis(hidden, pos[..., None], axis=1)
        targets, mask = jnp.take_along_axis(targets, pos, axis=1), jnp.take_along_axis(mask, pos, axis=1)
    return hidden, targets, mask


def _sft_count(mask, reduction):
    if reduction == "token_mean":
        return jnp.sum(mask)
    return jnp.sum((jnp.sum(mask, axis=-1) > 0).astype(jnp.float32))


def _supervised(model, ref_model, batch: SFTBatch, loss_fn, opts, *, reduction: str):
    own, opts = _split(opts)
    weights = batch.weights
    if weights is not None and isinstance(batch, GroupedSFTBatch):
        weights = jnp.asarray(weights).reshape(-1)
    from_logprobs = getattr(loss_fn, "from_logprobs", None)
    if from_logprobs is not None and supports_fused_head(model):
        # the loss's target-log-prob form on the fused projection + log-softmax (same loss, one [N, V] pass)
        hidden, targets, mask = _next_token_hidden(model, batch, own)
        lp, hit = head_logprobs(model, hidden, targets, temperature=own.get("temperature", 1.0), with_hit=True)
        loss, metrics = from_logprobs(lp, hit, mask, weights=weights, **opts)
    else:
        logits, targets, mask = _next_token_inputs(model, batch, own)
        loss, metrics = loss_fn(logits, targets, mask, weights=weights, **opts)
    total, count = _rescale(loss, _sft_count(mask, reduction))
    return WeightedLoss(total, count, metrics)


def _sft(model, ref_model, batch: SFTBatch, loss_fn, opts):
    """The sft loss's reduction is one of its options."""
    return _supervised(model, ref_model, batch, loss_fn, opts, reduction=opts.get("reduction", "token_mean"))


def _rs(model, ref_model, batch: RSBatch, loss_fn, opts):
    """Rejection sampling: the denominator counts the kept candidates' tokens (or sequences) only."""
    own, opts = _split(opts)
    logits, targets, mask = _next_token_inputs(model, batch, own)
    loss, metrics = loss_fn(logits, targets, mask, batch.rewards, **opts)
    keep = (jnp.asarray(batch.rewards, jnp.float32) > opts.get("threshold", 0.0)).astype(jnp.float32)
    total, count = _rescale(loss, _sft_count(mask * keep[:, None], opts.get("reduction", "token_mean")))
    if STEP_OPTION in own:  # padding rows carry no loss tokens; the fraction of kept candidates counts real ones
        metrics = {**metrics, "kept_fraction": jnp.mean(_real(own)(keep))}
    return WeightedLoss(total, count, metrics)


# ---------------------------------------------------------------- grpo / reinforce_pp
def _pg_count(mask, agg, max_len):
    b, t = mask.shape
    if agg == "grpo":
        return jnp.float32(b)
    if agg == "dr_grpo":
        return jnp.float32(b * (t if max_len is None else max_len))
    return jnp.sum(mask)


def _grpo(model, ref_model, batch: RLBatch, loss_fn, opts):
    own, opts = _split(opts)
    if batch.advantages is None:
        raise ValueError("loss 'grpo' needs RLBatch.advantages ([B] or [B, T]).")
    if "num_items_in_batch" in opts:
        raise ValueError(
            "do not pass num_items_in_batch to the train step: it normalises agg='dapo' by the "
            "active tokens of the whole (global) batch itself."
        )
    real = _real(own)
    ref = batch.ref_logprobs
    if ref is None and opts.get("beta", 0.0) != 0.0:
        _need_ref(ref_model, "grpo", "RLBatch.ref_logprobs")
        ref = _no_grad_logprobs(ref_model, batch, own)
    if opts.get("entropy_coef", 0.0) != 0.0:  # entropy bonus: per-token entropies of the policy
        lp, entropy = _rl_logprobs(model, batch, own, with_entropy=True)
        opts = {**opts, "entropy": _rows(batch, real(entropy))}
    else:
        lp = _rl_logprobs(model, batch, own)
    mask, old, adv = _flat_real(batch, real, "completion_mask", "old_logprobs", "advantages")
    mask = jnp.asarray(mask, jnp.float32)
    lp, ref = _rows(batch, real(lp)), real(ref)
    if own.get("target_tokens") is not None and old is not None and not isinstance(batch, GroupedRLBatch):
        lp = jnp.where(mask > 0, lp, jax.lax.stop_gradient(jnp.asarray(old, lp.dtype)))
    loss, metrics = loss_fn(lp, old, adv, mask, ref_logprobs=_rows(batch, ref), **opts)
    agg = opts.get("agg", "grpo")
    total, count = _rescale(loss, _pg_count(mask, agg, opts.get("max_len")), floor_one=agg != "dr_grpo")
    return WeightedLoss(total, count, metrics)


def _policy_gradient(model, ref_model, batch, loss_fn, opts, *, reduction: str, takes_reference: bool):
    """A policy-gradient-family loss on [B, T] completion tokens; per-sequence advantages broadcast to tokens."""
    own, opts = _split(opts)
    if batch.advantages is None:
        raise ValueError(
            "a policy_gradient loss needs advantages in the batch (RLBatch.advantages); an algorithm "
            "that fills token_rewards (reinforce_pp) trains only its own loss"
        )
    real = _real(own)
    mask, old, adv = _flat_real(batch, real, "completion_mask", "old_logprobs", "advantages")
    mask = jnp.asarray(mask, jnp.float32)
    adv = jnp.broadcast_to(adv[:, None], mask.shape) if adv.ndim == 1 else adv
    kw = {}
    if takes_reference:
        ref = batch.ref_logprobs
        if ref is None:
            _need_ref(ref_model, "policy_gradient", "RLBatch.ref_logprobs")
            ref = _no_grad_logprobs(ref_model, batch, own)
        kw["ref_logprobs"] = _rows(batch, real(ref))
    loss, metrics = loss_fn(_rows(batch, real(_rl_logprobs(model, batch, own))), old, adv, mask, **kw, **opts)
    count = jnp.sum(mask) if reduction == "token_mean" else jnp.float32(mask.shape[0])
    total, count = _rescale(loss, count)
    return WeightedLoss(total, count, metrics)


_RPP_RETURN_OPTIONS = ("kl_coef", "gamma", "kl", "whiten")


def _reinforce_pp_prepare(model, ref_model, batch: RLBatch, opts):
    """Whole-batch REINFORCE++ returns + whitening; micro-batches then see fixed advantages."""
    own, opts = _split(opts)
    if batch.token_rewards is None:
        raise ValueError("loss 'reinforce_pp' needs RLBatch.token_rewards ([B, T] per-token rewards).")
    mask = jnp.asarray(batch.completion_mask, jnp.float32)
    old = batch.old_logprobs
    if old is None:
        old = _no_grad_logprobs(model, batch, own)
    ref = batch.ref_logprobs
    if ref is None and opts.get("kl_coef", 0.0) != 0.0:
        _need_ref(ref_model, "reinforce_pp", "RLBatch.ref_logprobs")
        ref = _no_grad_logprobs(ref_model, batch, own)
    shape = mask.shape  # whitening runs over every token of the batch: flatten groups, then restore
    mask, old, ref, token_rewards = (_rows(batch, x) for x in (mask, old, ref, batch.token_rewards))
    rr = reinforce_pp_returns(
        token_rewards,
        mask,
        gamma=opts.get("gamma", 1.0),
        old_logprobs=old,
        ref_logprobs=ref,
        kl_coef=opts.get("kl_coef", 0.0),
        kl=opts.get("kl", "k1"),
        whiten=opts.get("whiten", True),
    )
    metrics = {
        "returns/mean": losses.masked_mean(rr.returns, mask),
        "rewards/mean": losses.masked_mean(rr.rewards, mask),
    }
    if ref is not None:
        metrics["kl"] = losses.masked_mean(old - ref, mask)
    batch = batch.replace(
        old_logprobs=old.reshape(shape),
        token_rewards=jax.lax.stop_gradient(rr.advantages).reshape(shape),
        ref_logprobs=None,
    )
    return batch, metrics


def _reinforce_pp(model, ref_model, batch: RLBatch, loss_fn, opts):
    own, opts = _split(opts)
    opts = {k: v for k, v in opts.items() if k not in _RPP_RETURN_OPTIONS}
    real = _real(own)
    lp = _rows(batch, real(_rl_logprobs(model, batch, own)))
    mask, old, advantages = _flat_real(batch, real, "completion_mask", "old_logprobs", "token_rewards")
    mask = jnp.asarray(mask, jnp.float32)
    # token_rewards already hold the whitened advantages: gamma=0, no KL, no whitening makes A_t = r_t.
    loss, metrics = loss_fn(lp, old, advantages, mask, gamma=0.0, kl_coef=0.0, whiten=False, **opts)
    metrics = {k: v for k, v in metrics.items() if k.startswith(("clip_ratio", "ratio/"))}
    total, count = _rescale(loss, _pg_count(mask, opts.get("agg", "token_mean"), None))
    return WeightedLoss(total, count, metrics)


# ---------------------------------------------------------------- dpo
def _dpo(model, ref_model, batch: PreferenceBatch, loss_fn, opts):
    own, opts = _split(opts)
    ids = jnp.concatenate([batch.chosen_input_ids, batch.rejected_input_ids])
    attn = jnp.concatenate([batch.chosen_attention_mask, batch.rejected_attention_mask])
    lmask = jnp.concatenate([batch.chosen_loss_mask, batch.rejected_loss_mask])
    kw = dict(temperature=own.get("temperature", 1.0), chunk_size=own.get("logprob_chunk_size"))
    b = batch.chosen_input_ids.shape[0]
    logps = summed_logprobs(model, ids, attn, lmask, **kw)
    if batch.ref_chosen_logps is None:
        _need_ref(ref_model, "dpo", "PreferenceBatch.ref_chosen_logps / ref_rejected_logps")
        ref = jax.lax.stop_gradient(summed_logprobs(ref_model, ids, attn, lmask, **kw))
        ref_chosen, ref_rejected = ref[:b], ref[b:]
    else:
        ref_chosen, ref_rejected = batch.ref_chosen_logps, batch.ref_rejected_logps
    real = _real(own)
    chosen, rejected = real(logps[:b]), real(logps[b:])
    loss, metrics = loss_fn(chosen, rejected, real(ref_chosen), real(ref_rejected), **opts)
    total, count = _rescale(loss, jnp.float32(chosen.shape[0]))
    return WeightedLoss(total, count, metrics)


# ---------------------------------------------------------------- prm
def _prm(model, ref_model, batch: PRMBatch, loss_fn, opts):
    own, opts = _split(opts)
    ids = own.get("tag_token_ids")
    if ids is None or len(ids) != 2:
        raise ValueError(
            "loss 'prm' needs loss option tag_token_ids=(id of ' +', id of ' -'), taken from the "
            "tokenizer (never hard-coded)."
        )
    tag_logits = prm_tag_logits(model, batch.input_ids, batch.attention_mask, batch.tag_positions, ids[0], ids[1])
    if own.get("temperature", 1.0) != 1.0:
        tag_logits = tag_logits / own["temperature"]
    real = _real(own)
    mask = real(jnp.asarray(batch.step_mask, jnp.float32))
    loss, metrics = loss_fn(real(tag_logits), real(batch.labels), mask, **opts)
    total, count = _rescale(loss, jnp.sum(mask))
    return WeightedLoss(total, count, metrics)


register_adapter("sft", LossAdapter((SFTBatch, GroupedSFTBatch), _sft))
register_adapter("rs", LossAdapter(RSBatch, _rs))
register_adapter("grpo", LossAdapter((RLBatch, GroupedRLBatch), _grpo))
register_adapter("reinforce_pp", LossAdapter((RLBatch, GroupedRLBatch), _reinforce_pp, prepare=_reinforce_pp_prepare))
# dpo and prm are fed by their families' adapters

__all__ = ["ADAPTER_OPTIONS", "LossAdapter", "WeightedLoss", "family_adapter", "get_adapter", "register_adapter"]
