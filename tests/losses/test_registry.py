import jax
import jax.numpy as jnp
import pytest

from rewardsql_jax import losses
from rewardsql_jax.losses import registry


def test_builtins_registered_and_sorted():
    names = losses.names()
    assert names == sorted(names)
    assert {"dpo", "grpo", "prm", "reinforce_pp", "rs", "sft"} <= set(names)
    assert losses.get("grpo") is losses.grpo
    assert losses.get("dpo") is losses.dpo
    assert losses.get("reinforce_pp") is losses.reinforce_pp


def test_unknown_name_lists_registered_losses():
    with pytest.raises(ValueError) as err:
        losses.get("grpoo")
    msg = str(err.value)
    assert "grpoo" in msg
    for name in losses.names():
        assert name in msg


def test_register_decorator_adds_a_user_loss(monkeypatch):
    monkeypatch.setattr(registry, "_LOSSES", dict(registry._LOSSES))

    @losses.register("my_pg", family="policy_gradient")
    def my_pg(logprobs, mask):
        return -jnp.sum(logprobs * mask) / jnp.sum(mask), {}

    assert losses.get("my_pg") is my_pg
    assert "my_pg" in losses.names()
    assert "my_pg" in losses.names("policy_gradient") and "my_pg" not in losses.names("preference")
    assert losses.spec("my_pg").family == "policy_gradient" and losses.spec("my_pg").reduction == "token_mean"
    loss, _ = losses.get("my_pg")(jnp.array([[-1.0, -3.0]]), jnp.array([[1.0, 0.0]]))
    assert float(loss) == pytest.approx(1.0)


def test_duplicate_name_is_refused_unless_override(monkeypatch):
    monkeypatch.setattr(registry, "_LOSSES", dict(registry._LOSSES))
    with pytest.raises(ValueError, match="already registered"):
        losses.register("grpo", family="policy_gradient")(lambda *a: None)

    def replacement(*a):
        return None

    losses.register("grpo", family="policy_gradient", override=True)(replacement)
    assert losses.get("grpo") is replacement


def test_bad_name_rejected():
    with pytest.raises(ValueError, match="non-empty string"):
        losses.register("", family="supervised")


def test_family_and_reduction_are_checked():
    with pytest.raises(ValueError, match="family='pg'.*policy_gradient"):
        losses.register("x", family="pg")
    with pytest.raises(ValueError, match="reduction='mean'"):
        losses.register("x", family="supervised", reduction="mean")


def test_builtin_families():
    assert {n: losses.family(n) for n in ("grpo", "reinforce_pp", "dpo", "sft", "rs", "prm")} == {
        "grpo": "policy_gradient",
        "reinforce_pp": "policy_gradient",
        "dpo": "preference",
        "sft": "supervised",
        "rs": "supervised",
        "prm": "prm",
    }


def test_docstring_example_runs(monkeypatch):
    """The 'add your own loss' example in rewardsql_jax.losses' docstring works as written."""
    import textwrap

    monkeypatch.setattr(registry, "_LOSSES", dict(registry._LOSSES))
    lines = losses.__doc__.splitlines()
    start = next(i for i, line in enumerate(lines) if line.rstrip().endswith("::")) + 1
    block = []
    for line in lines[start:]:
        if line.strip() and not line.startswith("    "):
            break
        block.append(line)
    namespace = {}
    exec(textwrap.dedent("\n".join(block)), namespace)
    fn = losses.get("my_pg")
    assert fn is namespace["my_pg"]
    loss, metrics = jax.jit(fn)(jnp.array([[-1.0, -2.0]]), None, jnp.array([[2.0, 2.0]]), jnp.array([[1.0, 1.0]]))
    assert float(loss) == pytest.approx(3.0)
    assert float(metrics["my_pg/adv_mean"]) == 2.0
