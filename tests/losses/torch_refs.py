"""PyTorch references of the loss formulas, written after TRL (GRPOTrainer._compute_loss, DPOTrainer sigmoid
loss), verl (core_algos: kl_penalty, compute_reinforce_plus_plus_outcome_advantage, compute_policy_loss,
agg_loss; torch_functional.masked_whiten) and the Reward-SQL paper. Independent of the JAX code: used by the
torch-tier parity tests and by scripts/make_loss_fixtures.py. fp32 throughout, like the JAX side.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from loss_cases import ARRAY_KWARGS, GRAD_ARGS, POSITIONAL


def kl_penalty(logp, ref, kind, clamp=None, log_ratio_clamp=None):
    if kind == "k1":  # verl "kl"
        kl = logp - ref
        if log_ratio_clamp is not None:
            kl = torch.clamp(kl, -log_ratio_clamp, log_ratio_clamp)
    elif kind == "k2":  # verl "mse"
        d = logp - ref
        if log_ratio_clamp is not None:
            d = torch.clamp(d, -log_ratio_clamp, log_ratio_clamp)
        kl = 0.5 * d.square()
    else:  # TRL per_token_kl / verl "low_var_kl" (with clamps)
        d = ref - logp
        if log_ratio_clamp is not None:
            d = torch.clamp(d, -log_ratio_clamp, log_ratio_clamp)
        kl = torch.exp(d) - d - 1
    if clamp is not None:
        kl = torch.clamp(kl, -clamp, clamp)
    return kl


def trl_grpo(
    logprobs,
    old_logprobs,
    advantages,
    mask,
    ref_logprobs=None,
    entropy=None,
    *,
    clip_eps=0.2,
    clip_eps_high=None,
    beta=0.0,
    kl="k3",
    agg="grpo",
    max_len=None,
    kl_clamp=None,
    kl_log_ratio_clamp=None,
    entropy_coef=0.0,
):
    eps_low, eps_high = clip_eps, clip_eps if clip_eps_high is None else clip_eps_high
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    coef_1 = torch.exp(logprobs - old_logprobs)
    coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
    per_token_loss = -torch.min(coef_1 * advantages, coef_2 * advantages)
    metrics = {}
    if ref_logprobs is not None:
        per_token_kl = kl_penalty(logprobs, ref_logprobs, kl, kl_clamp, kl_log_ratio_clamp)
        if beta != 0.0:
            per_token_loss = per_token_loss + beta * per_token_kl
        metrics["kl"] = (per_token_kl * mask).sum() / mask.sum()
    if entropy is not None:
        per_token_loss = per_token_loss - entropy_coef * entropy  # verl: pg_loss - entropy_coeff * entropy
        metrics["entropy"] = (entropy * mask).sum() / mask.sum()
    if agg == "grpo":
        loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    elif agg in ("bnpo", "token_mean"):
        loss = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)
    elif agg == "dr_grpo":
        loss = (per_token_loss * mask).sum() / (per_token_loss.size(0) * (max_len or per_token_loss.size(1)))
    elif agg == "dapo":
        loss = (per_token_loss * mask).sum() / mask.sum()  # num_items_in_batch on a single process
    else:
        raise ValueError(agg)
    adv = advantages.expand_as(coef_1)
    is_low = (coef_1 < 1 - eps_low) & (adv < 0)
    is_high = (coef_1 > 1 + eps_high) & (adv > 0)
    metrics["clip_ratio/low"] = (is_low * mask).sum() / mask.sum()
    metrics["clip_ratio/high"] = (is_high * mask).sum() / mask.sum()
    metrics["clip_ratio/region"] = ((is_low | is_high) * mask).sum() / mask.sum()
    return loss, metrics


def trl_dpo(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, *, beta=0.1, label_smoothing=0.0):
    logits = (chosen_logps - rejected_logps) - (ref_chosen_logps - ref_rejected_logps)
    losses = -F.logsigmoid(beta * logits) * (1 - label_smoothing) - F.logsigmoid(-beta * logits) * label_smoothing
    chosen_rewards = beta * (chosen_logps - ref_chosen_logps).detach()
    rejected_rewards = beta * (rejected_logps - ref_rejected_logps).detach()
    metrics = {
        "rewards/chosen": chosen_rewards.mean(),
        "rewards/rejected": rejected_rewards.mean(),
        "rewards/accuracies": (chosen_rewards > rejected_rewards).float().mean(),
        "rewards/margins": (chosen_rewards - rejected_rewards).mean(),
        "logps/chosen": chosen_logps.detach().mean(),
        "logps/rejected": rejected_logps.detach().mean(),
    }
    return losses.mean(), metrics


def prm_bce(tag_logits, labels, mask):
    # sigmoid(l+ - l-) == softmax([l+, l-])[0]: an independent formulation of the same BCE.
    per_step = F.binary_cross_entropy_with_logits(tag_logits[..., 0] - tag_logits[..., 1], labels, reduction="none")
    return (per_step * mask).sum() / mask.sum(), {}


def sft_ce(logits, targets, mask, weights=None, *, reduction="token_mean"):
    b, t, v = logits.shape
    nll = F.cross_entropy(logits.reshape(-1, v), targets.reshape(-1).long(), reduction="none").reshape(b, t)
    if weights is not None:
        nll = nll * weights[:, None]
    if reduction == "token_mean":
        loss = (nll * mask).sum() / mask.sum()
    else:
        n = mask.sum(-1)
        keep = n > 0
        loss = ((nll * mask).sum(-1)[keep] / n[keep]).mean()
    return loss, {}


def rs_ce(logits, targets, mask, rewards, *, threshold=0.0):
    keep = rewards > threshold
    return sft_ce(logits[keep], targets[keep], mask[keep])


def verl_masked_whiten(values, mask):
    mean = (values * mask).sum() / mask.sum()
    var = ((values - mean) ** 2 * mask).sum() / mask.sum()
    n = mask.sum()
    var = var * n / (n - 1)
    return (values - mean) * torch.rsqrt(var + 1e-8)


def verl_reinforce_pp_advantages(token_level_rewards, response_mask, gamma):
    returns = torch.zeros_like(token_level_rewards)
    running_return = 0
    for t in reversed(range(token_level_rewards.shape[1])):
        running_return = token_level_rewards[:, t] + gamma * running_return
        returns[:, t] = running_return
        running_return = running_return * response_mask[:, t]
    advantages = verl_masked_whiten(returns, response_mask) * response_mask
    return advantages, returns


def verl_reinforce_pp(
    logprobs,
    old_logprobs,
    token_rewards,
    mask,
    ref_logprobs=None,
    *,
    kl_coef=0.0,
    clip_eps=0.2,
    clip_eps_high=None,
    gamma=1.0,
    dual_clip=None,
):
    with torch.no_grad():
        rewards = token_rewards
        if kl_coef != 0.0:  # verl apply_kl_penalty with kl_penalty="kl"
            rewards = token_rewards - kl_coef * (old_logprobs - ref_logprobs) * mask
        advantages, returns = verl_reinforce_pp_advantages(rewards, mask, gamma)
    eps_high = clip_eps if clip_eps_high is None else clip_eps_high
    ratio = torch.exp(logprobs - old_logprobs)
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - clip_eps, 1 + eps_high)
    pg_losses = torch.maximum(pg_losses1, pg_losses2)
    if dual_clip is not None:
        pg_losses3 = -advantages * dual_clip
        pg_losses = torch.where(advantages < 0, torch.min(pg_losses3, pg_losses), pg_losses)
    loss = (pg_losses * mask).sum() / mask.sum()  # verl agg_loss token-mean
    metrics = {"returns/mean": (returns * mask).sum() / mask.sum(), "rewards/mean": (rewards * mask).sum() / mask.sum()}
    return loss, metrics


REFS = {"grpo": trl_grpo, "dpo": trl_dpo, "prm": prm_bce, "sft": sft_ce, "rs": rs_ce, "reinforce_pp": verl_reinforce_pp}


def run_torch(loss_name: str, inputs: dict, kwargs: dict):
    """Reference loss, gradients w.r.t. GRAD_ARGS and metrics, all as numpy."""
    tensors = {k: torch.tensor(np.asarray(v)) for k, v in inputs.items()}
    for k in GRAD_ARGS[loss_name]:
        tensors[k].requires_grad_(True)
    kw = dict(kwargs)
    if loss_name == "reinforce_pp":
        kw.pop("kl", None)
    args = [tensors[k] for k in POSITIONAL[loss_name]]
    extra = {k: tensors[k] for k in ARRAY_KWARGS if k in tensors}
    loss, metrics = REFS[loss_name](*args, **extra, **kw)
    loss.backward()
    grads = {k: tensors[k].grad.numpy() for k in GRAD_ARGS[loss_name]}
    return (loss.detach().numpy(), grads, {k: v.detach().numpy() for k, v in metrics.items()})
