"""Shared parity cases: numpy inputs + loss options, and how to run the JAX loss on them.

Used by test_parity_torch.py (JAX vs the PyTorch references in torch_refs.py), test_golden.py (JAX vs the
stored goldens) and scripts/make_loss_fixtures.py (writes tests/fixtures/loss_golden.npz). numpy + jax only.
"""

from __future__ import annotations

import hashlib
import json
from functools import partial

import jax
import numpy as np

B, T, V, S = 4, 12, 11, 6

# Which inputs each loss differentiates (the gradients checked against the reference).
GRAD_ARGS = {
    "grpo": ("logprobs",),
    "reinforce_pp": ("logprobs",),
    "dpo": ("chosen_logps", "rejected_logps"),
    "prm": ("tag_logits",),
    "sft": ("logits",),
    "rs": ("logits",),
}
POSITIONAL = {
    "grpo": ("logprobs", "old_logprobs", "advantages", "mask"),
    "reinforce_pp": ("logprobs", "old_logprobs", "token_rewards", "mask"),
    "dpo": ("chosen_logps", "rejected_logps", "ref_chosen_logps", "ref_rejected_logps"),
    "prm": ("tag_logits", "labels", "mask"),
    "sft": ("logits", "targets", "mask"),
    "rs": ("logits", "targets", "mask", "rewards"),
}
# Keyword arrays (not options) a case may carry.
ARRAY_KWARGS = ("ref_logprobs", "entropy", "weights")


def _mask(rng, lengths=None, t=T):
    lengths = rng.integers(1, t + 1, size=B) if lengths is None else np.asarray(lengths)
    return (np.arange(t)[None, :] < lengths[:, None]).astype(np.float32)


def _policy_inputs(rng, per_token_adv: bool, zero_row: bool = False):
    old = (-np.abs(rng.normal(1.0, 0.6, size=(B, T)))).astype(np.float32)
    logp = (old + rng.normal(0.0, 0.25, size=(B, T))).astype(np.float32)  # ratios spread over the clip range
    ref = (old + rng.normal(0.0, 0.3, size=(B, T))).astype(np.float32)
    adv = rng.normal(0.0, 1.0, size=(B, T) if per_token_adv else (B,)).astype(np.float32)
    mask = _mask(rng, [T, 0, 5, 9] if zero_row else None)
    return {"logprobs": logp, "old_logprobs": old, "advantages": adv, "mask": mask, "ref_logprobs": ref}


def make_cases() -> list[dict]:
    """All parity cases: dicts with name, loss, inputs (numpy), kwargs (static options)."""
    rng = np.random.default_rng(20240531)
    cases = []
    for agg in ("grpo", "bnpo", "dr_grpo", "dapo", "token_mean"):
        for i, kl in enumerate(("k1", "k2", "k3")):
            inputs = _policy_inputs(rng, per_token_adv=(i != 0), zero_row=(agg == "grpo" and kl == "k2"))
            kwargs = {"beta": 0.04, "kl": kl, "agg": agg, "clip_eps": 0.2}
            if kl == "k3":
                kwargs["clip_eps_high"] = 0.28
            if agg == "dr_grpo" and kl == "k2":
                kwargs["max_len"] = 16
            cases.append({"name": f"grpo/{agg}/{kl}", "loss": "grpo", "inputs": inputs, "kwargs": kwargs})
    inputs = _policy_inputs(rng, per_token_adv=True)
    inputs.pop("ref_logprobs")
    cases.append({"name": "grpo/no_kl", "loss": "grpo", "inputs": inputs, "kwargs": {}})
    inputs = _policy_inputs(rng, per_token_adv=True)
    inputs["entropy"] = np.abs(rng.normal(1.0, 0.5, size=(B, T))).astype(np.float32)
    cases.append(
        {
            "name": "grpo/entropy_kl_clamp",
            "loss": "grpo",
            "inputs": inputs,
            "kwargs": {
                "beta": 0.1,
                "kl": "k3",
                "kl_clamp": 0.05,
                "kl_log_ratio_clamp": 0.4,
                "entropy_coef": 0.01,
                "agg": "bnpo",
            },
        }
    )

    for beta, ls in ((0.1, 0.0), (0.5, 0.1)):
        inputs = {k: (-np.abs(rng.normal(20.0, 5.0, size=(8,)))).astype(np.float32) for k in POSITIONAL["dpo"]}
        cases.append(
            {
                "name": f"dpo/beta{beta}_ls{ls}",
                "loss": "dpo",
                "inputs": inputs,
                "kwargs": {"beta": beta, "label_smoothing": ls},
            }
        )

    inputs = {
        "tag_logits": rng.normal(0.0, 3.0, size=(B, S, 2)).astype(np.float32),
        "labels": rng.integers(0, 2, size=(B, S)).astype(np.float32),
        "mask": _mask(rng, [6, 2, 4, 1], S),
    }
    cases.append({"name": "prm/basic", "loss": "prm", "inputs": inputs, "kwargs": {}})

    def lm_inputs():
        return {
            "logits": rng.normal(0.0, 2.0, size=(B, T, V)).astype(np.float32),
            "targets": rng.integers(0, V, size=(B, T)).astype(np.int32),
            "mask": _mask(rng, [12, 3, 0, 8]),
        }

    cases.append({"name": "sft/token_mean", "loss": "sft", "inputs": lm_inputs(), "kwargs": {}})
    cases.append(
        {"name": "sft/sequence_mean", "loss": "sft", "inputs": lm_inputs(), "kwargs": {"reduction": "sequence_mean"}}
    )
    inputs = lm_inputs()
    inputs["weights"] = np.array([0.5, 2.0, 1.0, 1.5], np.float32)
    cases.append({"name": "sft/weighted", "loss": "sft", "inputs": inputs, "kwargs": {}})
    inputs = lm_inputs()
    inputs["rewards"] = np.array([1.8, 0.4, 1.2, 1.0], np.float32)
    cases.append({"name": "rs/threshold", "loss": "rs", "inputs": inputs, "kwargs": {"threshold": 1.0}})

    for name, kwargs in (
        ("plain", {}),
        ("kl_gamma", {"kl_coef": 0.01, "gamma": 0.9}),
        ("eq4_gamma0", {"kl_coef": 0.01, "gamma": 0.0}),
        ("dual_clip_high", {"kl_coef": 0.05, "clip_eps_high": 0.28, "dual_clip": 1.3}),
    ):
        p = _policy_inputs(rng, per_token_adv=True)
        clause = rng.choice(np.array([1.5, 0.5, -0.5, -1.5], np.float32), size=(B, 3))
        token_rewards = np.repeat(clause, T // 3, axis=1) * p["mask"]  # clause rewards filled over clause tokens
        inputs = {
            "logprobs": p["logprobs"],
            "old_logprobs": p["old_logprobs"],
            "token_rewards": token_rewards,
            "mask": p["mask"],
        }
        if "kl_coef" in kwargs:
            inputs["ref_logprobs"] = p["ref_logprobs"]
        cases.append({"name": f"reinforce_pp/{name}", "loss": "reinforce_pp", "inputs": inputs, "kwargs": kwargs})
    return cases


_MEMO: dict[str, tuple] = {}


def run_jax(loss_name: str, inputs: dict, kwargs: dict):
    """Jitted value_and_grad of the registered loss: -> (loss, {grad_arg: grad}, metrics), all numpy.

    Memoised on the exact inputs, so the golden and torch tiers compile each case once per session.
    """
    h = hashlib.sha256(json.dumps([loss_name, kwargs], sort_keys=True).encode())
    for k in sorted(inputs):
        h.update(k.encode() + str(inputs[k].dtype).encode() + str(inputs[k].shape).encode())
        h.update(np.ascontiguousarray(inputs[k]).tobytes())
    key = h.hexdigest()
    if key not in _MEMO:
        _MEMO[key] = _run_jax(loss_name, inputs, kwargs)
    return _MEMO[key]


def _run_jax(loss_name: str, inputs: dict, kwargs: dict):
    from rewardsql_jax import losses

    fn = losses.get(loss_name)
    grad_names = GRAD_ARGS[loss_name]
    pos = POSITIONAL[loss_name]
    extra = {k: inputs[k] for k in ARRAY_KWARGS if k in inputs}

    def objective(diff, rest):
        args = {**rest, **diff}
        return fn(*[args[k] for k in pos], **{k: args[k] for k in extra}, **kwargs)

    diff = {k: inputs[k] for k in grad_names}
    rest = {k: v for k, v in inputs.items() if k not in grad_names}
    vg = jax.jit(partial(jax.value_and_grad(objective, has_aux=True)))
    (loss, metrics), grads = vg(diff, rest)
    return (
        np.asarray(loss),
        {k: np.asarray(v) for k, v in grads.items()},
        {k: np.asarray(v) for k, v in metrics.items()},
    )
