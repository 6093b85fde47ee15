"""Golden tier (no torch needed): JAX losses and gradients equal the PyTorch-reference values stored in
tests/fixtures/loss_golden.npz (written by scripts/make_loss_fixtures.py) to 1e-6."""

import json
import pathlib

import numpy as np
import pytest

from loss_cases import make_cases, run_jax

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "loss_golden.npz"


def _load():
    data = np.load(GOLDEN)
    meta = json.loads(str(data["meta"]))
    cases = []
    for i, m in enumerate(meta):

        def sub(prefix, i=i):
            p = f"{i}/{prefix}/"
            return {k[len(p) :]: data[k] for k in data.files if k.startswith(p)}

        cases.append(
            {**m, "inputs": sub("in"), "loss_value": data[f"{i}/loss"], "grads": sub("grad"), "metrics": sub("metric")}
        )
    return cases


CASES = _load()


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_jax_matches_golden(case):
    loss, grads, metrics = run_jax(case["loss"], case["inputs"], case["kwargs"])
    np.testing.assert_allclose(loss, case["loss_value"], rtol=1e-6, atol=1e-6)
    assert case["grads"], "golden case without gradients"
    for k, g in case["grads"].items():
        np.testing.assert_allclose(grads[k], g, rtol=1e-6, atol=1e-6, err_msg=k)
    for k, m in case["metrics"].items():
        np.testing.assert_allclose(metrics[k], m, rtol=1e-6, atol=1e-6, err_msg=k)


def test_golden_file_is_current():
    """The stored cases are exactly the ones loss_cases.py defines (rerun the script after editing cases)."""
    fresh = make_cases()
    assert [c["name"] for c in CASES] == [c["name"] for c in fresh]
    for stored, new in zip(CASES, fresh):
        assert stored["kwargs"] == new["kwargs"], stored["name"]
        assert sorted(stored["inputs"]) == sorted(new["inputs"]), stored["name"]
        for k, v in new["inputs"].items():
            np.testing.assert_array_equal(stored["inputs"][k], v, err_msg=f"{stored['name']}:{k}")


def test_golden_covers_every_grpo_mode_and_estimator():
    combos = {(c["kwargs"].get("agg"), c["kwargs"].get("kl")) for c in CASES if c["loss"] == "grpo"}
    for agg in ("grpo", "bnpo", "dr_grpo", "dapo", "token_mean"):
        for kl in ("k1", "k2", "k3"):
            assert (agg, kl) in combos
    assert {c["loss"] for c in CASES} >= {"grpo", "dpo", "prm", "sft", "rs", "reinforce_pp"}
