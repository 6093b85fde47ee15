"""Loss families: run the model on a (micro-)batch and feed a registered loss its inputs; the loss's declared
normalisation turns its output into a (numerator, denominator) pair for exact accumulation.

The train step (``step.py``) splits a batch into micro-batches; on each, the family of the loss
(``losses.register(..., family=...)``) computes what the family's losses take and calls the loss, and
``losses.weighted_loss`` turns the loss's output into (numerator_m, denominator_m) with the loss's ``reduction``
(``losses/normalisation.py``: the one table of denominators). The step sums both over micro-batches and divides
once, loss = sum_m numerator_m / max(sum_m denominator_m, 1), so accumulating gives the full-batch loss and
gradient. The families:

  policy_gradient  ``RLBatch`` / ``GroupedRLBatch``: token log-probs [B, T] (each prompt once for a grouped batch),
                   old log-probs, advantages broadcast to tokens, completion mask; the reference's log-probs and the
                   policy's entropies when the loss needs them (``LossSpec.inputs``)
  preference       ``PreferenceBatch``: summed chosen / rejected log-probs and the reference's (DPO)
  supervised       ``SFTBatch`` / ``GroupedSFTBatch`` / ``RSBatch``: next-token logits (or, through
                   ``fn.from_logprobs``, the targets' log-probs from one fused vocabulary op), targets, loss mask
                   and the batch's per-row fields (weights, rewards)
  prm              ``PRMBatch`` / ``GroupedPRMBatch``: the PRM's ' +' / ' -' logits at the step tags (each group's
                   shared prefix computed once for a grouped batch), labels, step mask

Batch-global statistics are computed before splitting, by hooks the loss declares: a policy-gradient loss's
``prepare`` (REINFORCE++'s whitening over the whole batch, as verl whitens over the whole rollout batch) runs on
the whole batch in ``prepare`` below, then each micro-batch sees its fixed advantages; a supervised loss's ``keep``
(rejection sampling's filter) zeroes the loss mask of the rows it drops, so the denominator counts kept rows only.

A batch the step padded so its rows split over the mesh (``padding``) reaches the families with the option
``real_rows``: the per-row loss inputs keep the real rows only (the supervised ones see masked padding rows).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp

from rewardsql_jax import losses
from rewardsql_jax.models.prm_head import prm_tag_logits, tag_logits_from_hidden
from rewardsql_jax.models.shared_prefix import shared_prefix_hidden

from .batch import (
    GroupedPRMBatch,
    GroupedRLBatch,
    GroupedSFTBatch,
    PRMBatch,
    PreferenceBatch,
    RLBatch,
    RSBatch,
    SFTBatch,
)
from .logprobs import (
    hidden_logprobs,
    sequence_logprobs,
    sequence_logprobs_and_entropy,
    shared_prefix_logprobs,
    summed_logprobs,
)
from .vocab_head import head_logprobs, supports_fused_head

# Options the families consume themselves; every other loss option goes to the loss function.
FAMILY_OPTIONS = ("temperature", "logprob_chunk_size", "tag_token_ids", "target_tokens")
# Set by the train step, not by users: the real rows of a padded micro-batch (``padding.RealRows``).
STEP_OPTION = "real_rows"


@dataclasses.dataclass(frozen=True)
class Family:
    """How the train step feeds the losses of one family.

    batch_type(spec) -> the batch classes the loss trains on
    weighted(model, ref_model, batch, spec, options) -> WeightedLoss           (differentiated w.r.t. model)
    prepare(model, ref_model, batch, spec, options) -> (batch, options, metrics)  (whole batch, no gradient; run
                                                                                when the loss has a prepare hook)
    """

    batch_type: Callable
    weighted: Callable
    prepare: Callable | None = None


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
    mask = jnp.asarray(batch.completion_mask, jnp.float32)[:, 1:]
    pos, hidden, targets, _ = _first_loss_positions(k, mask, hidden, jnp.asarray(batch.input_ids)[:, 1:])
    lp = hidden_logprobs(model, hidden, targets, opts.get("temperature", 1.0), opts.get("logprob_chunk_size"))
    rows = jnp.arange(pos.shape[0])[:, None]
    out = jnp.zeros(mask.shape, lp.dtype).at[rows, pos].set(lp)
    return jnp.pad(out, ((0, 0), (1, 0)))


def _rows(batch, x):
    """A GroupedRLBatch's [P, G, ...] arrays as rows [P * G, ...] (what the losses take); RLBatch's as they are."""
    if x is None or not isinstance(batch, GroupedRLBatch):
        return x
    return x.reshape(-1, *x.shape[2:])


def _flat_real(batch, real, *fields):
    """``_flat`` of the real rows (``real``: ``_real(own)``) of the batch's ``fields``."""
    return [_rows(batch, real(getattr(batch, f))) for f in fields]


def _no_grad_logprobs(model, batch, opts):
    return jax.lax.stop_gradient(_rl_logprobs(model, batch, opts))


# ---------------------------------------------------------------- next-token inputs
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
        _, hidden, targets, mask = _first_loss_positions(k, mask, hidden, targets)
    return hidden, targets, mask


def _first_loss_positions(k: int, mask, hidden, targets):
    """(positions [B, K], hidden [B, K, D], targets [B, K], mask [B, K]) at each row's first K loss positions, in
    order: a stable sort on -mask puts a row's loss positions first."""
    pos = jnp.argsort(-mask, axis=1, stable=True)[:, :k]
    hidden = jnp.take_along_axis(hidden, pos[..., None], axis=1)
    return pos, hidden, jnp.take_along_axis(targets, pos, axis=1), jnp.take_along_axis(mask, pos, axis=1)


def _need_ref(ref_model, loss_name, field):
    if ref_model is None:
        raise ValueError(
            f"loss {loss_name!r} needs reference log-probs: fill {field} in the batch, or keep a "
            f"frozen reference in the state (create_train_state(..., with_reference=True))."
        )


def _split(opts):
    keys = (*FAMILY_OPTIONS, STEP_OPTION)
    own = {k: opts[k] for k in keys if k in opts}
    return own, {k: v for k, v in opts.items() if k not in keys}


def _real(own):
    """The function that keeps a per-row array's real rows (``padding.RealRows``); the identity without padding."""
    rows = own.get(STEP_OPTION)
    return (lambda x: x) if rows is None else rows.take


def _reference(model_or_ref, batch, own, spec, opts, field="RLBatch.ref_logprobs"):
    """The batch's reference log-probs, or the frozen reference's when the loss needs them (else None)."""
    ref = batch.ref_logprobs
    if ref is None and "ref_logprobs" in spec.inputs(opts):
        _need_ref(model_or_ref, spec.name, field)
        ref = _no_grad_logprobs(model_or_ref, batch, own)
    return ref


# ---------------------------------------------------------------- policy gradient
def _policy_gradient(model, ref_model, batch, spec, opts):
    """A policy-gradient loss on [B, T] completion tokens (rows of a grouped batch flattened to [P * G, Lc]);
    per-sequence advantages broadcast to tokens; reference log-probs and entropies when the loss needs them."""
    own, opts = _split(opts)
    if batch.advantages is None:
        raise ValueError(
            f"loss {spec.name!r} needs RLBatch.advantages ([B] or [B, T]); an algorithm that fills only "
            f"token_rewards trains a loss whose prepare hook turns them into advantages (reinforce_pp)."
        )
    if "num_items_in_batch" in opts:
        raise ValueError(
            "do not pass num_items_in_batch to the train step: it normalises agg='dapo' by the "
            "active tokens of the whole (global) batch itself."
        )
    real, needs = _real(own), spec.inputs(opts)
    kw = {}
    if spec.takes("ref_logprobs"):
        kw["ref_logprobs"] = _rows(batch, real(_reference(ref_model, batch, own, spec, opts)))
    if "entropy" in needs:  # e.g. an entropy bonus: per-token entropies of the policy
        lp, entropy = _rl_logprobs(model, batch, own, with_entropy=True)
        kw["entropy"] = _rows(batch, real(entropy))
    else:
        lp = _rl_logprobs(model, batch, own)
    mask, old, adv = _flat_real(batch, real, "completion_mask", "old_logprobs", "advantages")
    mask = jnp.asarray(mask, jnp.float32)
    adv = jnp.broadcast_to(adv[:, None], mask.shape) if adv.ndim == 1 else adv
    lp = _rows(batch, real(lp))
    if own.get("target_tokens") is not None and old is not None and not isinstance(batch, GroupedRLBatch):
        lp = jnp.where(mask > 0, lp, jax.lax.stop_gradient(jnp.asarray(old, lp.dtype)))
    out = spec.fn(lp, old, adv, mask, **kw, **opts)
    return losses.weighted_loss(out, mask, spec.normalisation(opts))


def _policy_gradient_prepare(model, ref_model, batch, spec, opts):
    """The loss's ``prepare`` hook on the whole batch (``Prepared``): its advantages replace the batch's, its
    options the loss's for every micro-batch; old log-probs are filled in, reference log-probs consumed."""
    own, opts = _split(opts)
    if batch.token_rewards is None:
        raise ValueError(f"loss {spec.name!r} needs RLBatch.token_rewards ([B, T] per-token rewards).")
    old = batch.old_logprobs
    if old is None:
        old = _no_grad_logprobs(model, batch, own)
    ref = _reference(ref_model, batch, own, spec, opts)
    mask = jnp.asarray(batch.completion_mask, jnp.float32)
    shape = mask.shape  # statistics over every token of the batch: flatten groups, then restore
    mask, old, ref, token_rewards = (_rows(batch, x) for x in (mask, old, ref, batch.token_rewards))
    prepared = spec.prepare(old, ref, token_rewards, mask, **opts)
    batch = batch.replace(
        old_logprobs=old.reshape(shape),
        advantages=prepared.advantages.reshape(shape),
        ref_logprobs=None,
        token_rewards=None,
    )
    return batch, {**own, **prepared.options}, prepared.metrics


# ---------------------------------------------------------------- supervised
def _supervised(model, ref_model, batch, spec, opts):
    """A supervised loss on next-token predictions of the loss-masked tokens; a ``keep`` hook drops rows."""
    own, opts = _split(opts)
    weights = getattr(batch, "weights", None)
    if weights is not None and isinstance(batch, GroupedSFTBatch):
        weights = jnp.asarray(weights).reshape(-1)
    rows = {"weights": weights} if weights is not None or spec.takes("weights") else {}
    if isinstance(batch, RSBatch):
        rows["rewards"] = batch.rewards
    from_logprobs = getattr(spec.fn, "from_logprobs", None)
    fused = from_logprobs is not None and supports_fused_head(model)
    if fused:  # the loss's target-log-prob form on the fused projection + log-softmax (same loss, one [N, V] pass)
        hidden, targets, mask = _next_token_hidden(model, batch, own)
        first, second = head_logprobs(model, hidden, targets, temperature=own.get("temperature", 1.0), with_hit=True)
    else:
        first, targets, mask = _next_token_inputs(model, batch, own)
        second = targets
    keep = None
    if spec.keep is not None:  # rows the loss trains on (rejection sampling's filter): the others' mask is zeroed
        keep = spec.keep(**rows, **opts)
        mask = mask * keep[:, None]
    out = (from_logprobs if fused else spec.fn)(first, second, mask, **rows, **opts)
    weighted = losses.weighted_loss(out, mask, spec.normalisation(opts))
    if keep is not None:  # padding rows carry no loss tokens; the fraction of kept rows counts real ones
        weighted = weighted.replace(metrics={**weighted.metrics, "kept_fraction": jnp.mean(_real(own)(keep))})
    return weighted


# ---------------------------------------------------------------- preference
def _preference(model, ref_model, batch: PreferenceBatch, spec, opts):
    """A preference loss on the summed completion log-probs of chosen and rejected rows (one row per pair)."""
    own, opts = _split(opts)
    ids = jnp.concatenate([batch.chosen_input_ids, batch.rejected_input_ids])
    attn = jnp.concatenate([batch.chosen_attention_mask, batch.rejected_attention_mask])
    lmask = jnp.concatenate([batch.chosen_loss_mask, batch.rejected_loss_mask])
    kw = dict(temperature=own.get("temperature", 1.0), chunk_size=own.get("logprob_chunk_size"))
    b = batch.chosen_input_ids.shape[0]
    logps = summed_logprobs(model, ids, attn, lmask, **kw)
    if batch.ref_chosen_logps is None:
        _need_ref(ref_model, spec.name, "PreferenceBatch.ref_chosen_logps / ref_rejected_logps")
        ref = jax.lax.stop_gradient(summed_logprobs(ref_model, ids, attn, lmask, **kw))
        ref_chosen, ref_rejected = ref[:b], ref[b:]
    else:
        ref_chosen, ref_rejected = batch.ref_chosen_logps, batch.ref_rejected_logps
    real = _real(own)
    chosen, rejected = real(logps[:b]), real(logps[b:])
    out = spec.fn(chosen, rejected, real(ref_chosen), real(ref_rejected), **opts)
    return losses.weighted_loss(out, jnp.ones((chosen.shape[0], 1)), spec.normalisation(opts))  # a pair = a row


# ---------------------------------------------------------------- prm
def _prm(model, ref_model, batch: PRMBatch, spec, opts):
    """A PRM loss on the ' +' / ' -' logits at each step tag."""
    own, opts = _split(opts)
    ids = own.get("tag_token_ids")
    if ids is None or len(ids) != 2:
        raise ValueError(
            f"loss {spec.name!r} needs loss option tag_token_ids=(id of ' +', id of ' -'), taken from the "
            "tokenizer (never hard-coded)."
        )
    real = _real(own)
    if isinstance(batch, GroupedPRMBatch):  # each group's prefix once; a tag's state is the one after it (t + 1)
        hidden = shared_prefix_hidden(model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids)
        p, g = hidden.shape[:2]
        positions = jnp.asarray(batch.tag_positions, jnp.int32).reshape(p * g, -1) + 1
        tag_logits = tag_logits_from_hidden(model, hidden.reshape(p * g, *hidden.shape[2:]), positions, *ids)
        tag_logits = tag_logits.reshape(p, g, *tag_logits.shape[1:])

        def rows(x):  # the real groups' [P, G, ...] as rows [P * G, ...]
            x = real(jnp.asarray(x))
            return x.reshape(-1, *x.shape[2:])
    else:
        tag_logits = prm_tag_logits(model, batch.input_ids, batch.attention_mask, batch.tag_positions, *ids)
        rows = real
    if own.get("temperature", 1.0) != 1.0:
        tag_logits = tag_logits / own["temperature"]
    mask = rows(jnp.asarray(batch.step_mask, jnp.float32))
    out = spec.fn(rows(tag_logits), rows(batch.labels), mask, **opts)
    return losses.weighted_loss(out, mask, spec.normalisation(opts))


def _supervised_batches(spec):
    """A supervised loss that takes per-candidate ``rewards`` (rejection sampling) trains on RSBatch."""
    return (RSBatch,) if spec.takes("rewards") else (SFTBatch, GroupedSFTBatch)


FAMILIES = {
    "policy_gradient": Family(lambda spec: (RLBatch, GroupedRLBatch), _policy_gradient, _policy_gradient_prepare),
    "preference": Family(lambda spec: (PreferenceBatch,), _preference),
    "supervised": Family(_supervised_batches, _supervised),
    "prm": Family(lambda spec: (PRMBatch, GroupedPRMBatch), _prm),
}


def family(name: str) -> Family:
    """How the train step feeds the losses of family ``name`` (``losses.FAMILIES``)."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown loss family {name!r}; families: {list(losses.FAMILIES)}") from None


__all__ = ["FAMILIES", "FAMILY_OPTIONS", "Family", "family"]
