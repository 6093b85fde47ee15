"""End-to-end parity: SFT and GRPO train steps of a tiny Qwen2 in JAX vs the same steps in PyTorch.

Reference: transformers Qwen2ForCausalLM + torch.nn.utils.clip_grad_norm_ + torch.optim.AdamW (decay on
>= 2-D weights only, like the HF Trainer), the GRPO loss written below following TRL GRPOTrainer._compute_loss
(loss_type="grpo", k3 KL, temperature-scaled log-probs). Same weights (through save_pretrained /
from_pretrained), same batch, two optimizer steps.

Tolerances (fp32 on CPU): loss values 2e-6 abs; gradients 5e-7 abs (measured 1.2e-7; max |g| ~ 1e-1);
parameters after two AdamW steps at lr=1e-3: 2e-6 abs (measured 4.2e-7). Adam's update is lr * m / (sqrt(v) + eps), ~lr * sign(g) on the first step, so a
  component whose gradient is below the cross-framework rounding noise (|g| ~ 1e-9) can move by up to
~lr * |dg| / eps (measured 1.3e-5 with eps=1e-8); the parameter check therefore uses eps=1e-6, which caps
that amplification, while the gradient check tests the step's math directly.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import jax
import torch
import transformers
from flax import nnx

from rewardsql_jax.models import from_pretrained
from rewardsql_jax.models.registry import hf_key_table
from rewardsql_jax.training.batch import RLBatch, SFTBatch
from rewardsql_jax.training.optimizer import OptimizerConfig, make_optimizer
from rewardsql_jax.training.state import create_train_state
from rewardsql_jax.training.step import loss_and_grads, make_train_step

pytestmark = pytest.mark.parity

B, T, V = 4, 12, 128
OPT = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01, max_norm=1.0)
GRPO = dict(clip_eps=0.2, beta=0.04, temperature=0.7)


def _hf_model(tmp_path, seed=0):
    torch.manual_seed(seed)
    cfg = transformers.Qwen2Config(
        vocab_size=V,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
    )
    model = transformers.Qwen2ForCausalLM(cfg)
    model.config._attn_implementation = "eager"
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias") or "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(str(tmp_path))
    return model.train()


def _batch(seed=1):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, V, (B, T)).astype(np.int32)
    attn = np.ones((B, T), np.int32)
    attn[1, -3:] = 0  # right padding
    comp = np.zeros((B, T), np.float32)
    comp[:, 5:] = 1.0
    comp *= attn
    return ids, attn, comp


def _torch_opt(model):
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": OPT["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}],
        lr=OPT["lr"],
        betas=OPT["betas"],
        eps=OPT["eps"],
    )


def _jax_state(path):
    model = from_pretrained(path)
    cfg = OptimizerConfig(
        learning_rate=OPT["lr"],
        b1=OPT["betas"][0],
        b2=OPT["betas"][1],
        eps=OPT["eps"],
        weight_decay=OPT["weight_decay"],
        max_grad_norm=OPT["max_norm"],
    )
    return create_train_state(model, make_optimizer(cfg))


def _torch_logps(model, ids, attn, temperature):
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1] / temperature
    lp = torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, 1:, None])[..., 0]
    return torch.nn.functional.pad(lp, (1, 0))


def _torch_grpo_loss(model, ids, attn, mask, old, ref, adv):
    """TRL GRPOTrainer._compute_loss (loss_type='grpo') with per-token advantages."""
    logp = _torch_logps(model, ids, attn, GRPO["temperature"])
    coef_1 = torch.exp(logp - old)
    coef_2 = torch.clamp(coef_1, 1 - GRPO["clip_eps"], 1 + GRPO["clip_eps"])
    per_token = -torch.min(coef_1 * adv, coef_2 * adv)
    per_token = per_token + GRPO["beta"] * (torch.exp(ref - logp) - (ref - logp) - 1)
    return ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()


def _torch_steps(model, loss_fn, n):
    opt, losses, grads = _torch_opt(model), [], None
    for i in range(n):
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        if i == 0:
            grads = {k: p.grad.detach().clone().numpy() for k, p in model.named_parameters()}
        torch.nn.utils.clip_grad_norm_(model.parameters(), OPT["max_norm"])
        opt.step()
        losses.append(float(loss.detach()))
    return losses, grads


def _flat(state_like):
    return {p: np.asarray(v.get_value()) for p, v in nnx.to_flat_state(state_like)}


def _compare_params(tree, torch_tensors, cfg, atol, what):
    flat = _flat(tree)
    worst = 0.0
    for row in hf_key_table(cfg):
        ref = torch_tensors[row.key]
        ref = ref.T if row.transpose else ref
        np.testing.assert_allclose(flat[row.path], ref, atol=atol, rtol=0, err_msg=f"{what} {row.key}")
        worst = max(worst, float(np.max(np.abs(flat[row.path] - ref))))
    return worst


def _run(tmp_path, loss_name, options, batch, torch_loss, n_steps=2):
    hf = _hf_model(tmp_path)
    state = _jax_state(tmp_path)
    cfg = state.model().config
    loss0, grads, _ = jax.jit(
        lambda p: loss_and_grads(p, None, state.graphdef, batch, loss_name=loss_name, loss_options=options)
    )(state.params)
    step = make_train_step(state.graphdef, loss_name, options)
    jax_losses, first_metrics = [], None
    for _ in range(n_steps):
        state, metrics = step(state, batch)
        first_metrics = first_metrics or metrics
        jax_losses.append(float(metrics["loss"]))
    torch_losses, torch_grads = _torch_steps(hf, lambda: torch_loss(hf), n_steps)
    np.testing.assert_allclose(float(loss0), torch_losses[0], atol=2e-6, rtol=0)
    np.testing.assert_allclose(jax_losses, torch_losses, atol=2e-6, rtol=0)
    assert torch_losses[1] != torch_losses[0]  # the first update changed the model
    _compare_params(grads, torch_grads, cfg, 5e-7, "grad")
    torch_params = {k: p.detach().numpy() for k, p in hf.named_parameters()}
    _compare_params(state.params, torch_params, cfg, 2e-6, "param")
    return first_metrics


def test_sft_step_matches_torch_adamw(tmp_path):
    ids, attn, comp = _batch()
    batch = SFTBatch(ids, attn, comp)
    labels = torch.where(torch.as_tensor(comp) > 0, torch.as_tensor(ids, dtype=torch.long), -100)

    def torch_loss(model):
        return model(
            input_ids=torch.as_tensor(ids, dtype=torch.long), attention_mask=torch.as_tensor(attn), labels=labels
        ).loss

    _run(tmp_path, "sft", {}, batch, torch_loss)


def test_grpo_step_matches_torch_trl_formula(tmp_path):
    ids, attn, comp = _batch()
    rng = np.random.default_rng(2)
    hf = _hf_model(tmp_path / "probe")
    with torch.no_grad():  # old/ref log-probs near the policy's so some ratios clip and some do not
        cur = _torch_logps(
            hf, torch.as_tensor(ids, dtype=torch.long), torch.as_tensor(attn), GRPO["temperature"]
        ).numpy()
    old = (cur + 0.3 * rng.normal(size=(B, T))).astype(np.float32)
    ref = (cur + 0.3 * rng.normal(size=(B, T))).astype(np.float32)
    adv = rng.normal(size=(B, T)).astype(np.float32)
    batch = RLBatch(ids, attn, comp, old_logprobs=old, advantages=adv, ref_logprobs=ref)
    t = {k: torch.as_tensor(v) for k, v in dict(old=old, ref=ref, adv=adv, mask=comp).items()}

    def torch_loss(model):
        return _torch_grpo_loss(
            model,
            torch.as_tensor(ids, dtype=torch.long),
            torch.as_tensor(attn),
            t["mask"],
            t["old"],
            t["ref"],
            t["adv"],
        )

    opts = {"clip_eps": GRPO["clip_eps"], "beta": GRPO["beta"], "temperature": GRPO["temperature"], "agg": "grpo"}
    metrics = _run(tmp_path, "grpo", opts, batch, torch_loss)
    assert 0.0 < float(metrics["clip_ratio/region"]) < 1.0  # both clipped and unclipped tokens are exercised
