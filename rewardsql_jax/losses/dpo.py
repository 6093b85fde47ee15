"""Sigmoid DPO loss on summed completion log-probs (Rafailov et al. 2023; Reward-SQL Sec. 5.2 L_DPO)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .registry import register
from .shapes import check_rank, check_same_shape


@register("dpo", family="preference", reduction="sequence_mean")
def dpo(
    chosen_logps,
    rejected_logps,
    ref_chosen_logps,
    ref_rejected_logps,
    *,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
):
    """DPO sigmoid loss as TRL DPOTrainer (loss_type="sigmoid") computes it.

    logits = (chosen - rejected) - (ref_chosen - ref_rejected)
    loss   = mean( -logsigmoid(beta * logits) * (1 - ls) - logsigmoid(-beta * logits) * ls )
    (Rafailov et al. 2023, Eq. 7; ls > 0 is the conservative DPO / cDPO variant.)

    Args: four [B] arrays of summed completion log-probs (policy: differentiated; reference: constants).
    Returns: (loss, metrics) with TRL's rewards/chosen, rewards/rejected (beta * policy-minus-reference logps,
      batch means), rewards/accuracies, rewards/margins, logps/chosen, logps/rejected.
    """
    check_rank("chosen_logps", chosen_logps, 1, "[B] of summed completion log-probs")
    check_same_shape(
        "chosen_logps",
        chosen_logps,
        rejected_logps=rejected_logps,
        ref_chosen_logps=ref_chosen_logps,
        ref_rejected_logps=ref_rejected_logps,
    )
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing must be in [0, 0.5), got {label_smoothing}.")
    chosen, rejected, ref_chosen, ref_rejected = (
        jnp.asarray(x, jnp.float32) for x in (chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps)
    )
    ref_chosen, ref_rejected = jax.lax.stop_gradient((ref_chosen, ref_rejected))  # the reference model is frozen
    logits = (chosen - rejected) - (ref_chosen - ref_rejected)
    losses = (
        -jax.nn.log_sigmoid(beta * logits) * (1.0 - label_smoothing)
        - jax.nn.log_sigmoid(-beta * logits) * label_smoothing
    )
    chosen_rewards = jax.lax.stop_gradient(beta * (chosen - ref_chosen))
    rejected_rewards = jax.lax.stop_gradient(beta * (rejected - ref_rejected))
    metrics = {
        "rewards/chosen": jnp.mean(chosen_rewards),
        "rewards/rejected": jnp.mean(rejected_rewards),
        "rewards/accuracies": jnp.mean((chosen_rewards > rejected_rewards).astype(jnp.float32)),
        "rewards/margins": jnp.mean(chosen_rewards - rejected_rewards),
        "logps/chosen": jnp.mean(jax.lax.stop_gradient(chosen)),
        "logps/rejected": jnp.mean(jax.lax.stop_gradient(rejected)),
    }
    return jnp.mean(losses), metrics
