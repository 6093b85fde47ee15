import numpy as np
import pytest

from rewardsql_jax.rewards import process_advantages, steps_to_tokens

STEPS = [[0.9, 0.7], [0.4, 0.2, 0.3]]
OUT = [1.0, 0.0]


def test_paper_variant_by_hand():
    """Reward-SQL Sec. 5.3: R = mean step score + outcome; z-score in the group; A*s if A > 0 else A*(1-s)."""
    r = np.array([0.8 + 1.0, 0.3 + 0.0])
    a = (r - r.mean()) / (r.std(ddof=1) + 1e-6)
    adv = process_advantages(STEPS, OUT, 2)
    np.testing.assert_allclose(adv[0], a[0] * np.array([0.9, 0.7]), rtol=1e-6)
    np.testing.assert_allclose(adv[1], a[1] * (1 - np.array([0.4, 0.2, 0.3])), rtol=1e-6)
    # higher-scored steps get more credit when A > 0, lower-scored steps more blame when A < 0
    assert adv[0][0] > adv[0][1] > 0
    assert adv[1][1] < adv[1][2] < adv[1][0] < 0


def test_released_variant_uses_distinct_nonzero_token_rewards():
    steps = [[0.5, 0.5, 0.8], [0.0, 0.3], [0.2], [0.9, 0.1]]
    out = [0.0, 0.0, 1.0, 1.0]
    rm = 2.0
    tok = [rm * np.array(s) + o for s, o in zip(steps, out)]  # [1, 1, 1.6], [0, 0.6], [1.4], [2.8, 1.2]
    # the released reward manager fills backwards from nonzero scores only: the 0.0 step takes the next one's
    tok[1] = np.array([0.6, 0.6])
    resp = np.array([np.mean([1.0, 1.6]), 0.6, 1.4, np.mean([2.8, 1.2])])  # distinct, nonzero
    a = np.concatenate([(g - g.mean()) / (g.std(ddof=1) + 1e-6) for g in resp.reshape(2, 2)])
    adv = process_advantages(steps, out, 2, variant="released", rm_coef=rm)
    for i in range(4):
        t = tok[i]
        exp = np.where(t > 1, (t - 1) * a[i], t * a[i]) if a[i] > 0 else (1 - t) * a[i]
        np.testing.assert_allclose(adv[i], exp, rtol=1e-6, atol=1e-7)
    assert a[0] > 0 and a[2] < 0 and a[3] > 0  # both branches exercised
    np.testing.assert_allclose(adv[0], [a[0], a[0], 0.6 * a[0]], rtol=1e-6)  # r = 1 is not > 1: r * A


def test_deepseekmath_variant_by_hand():
    """Appendix A.3.1: normalise all step scores of the group, advantage = sum of later normalised steps."""
    adv = process_advantages([[0.9, 0.5], [0.1]], [1.0, 0.0], 2, variant="deepseekmath")
    # mean 0.5, Bessel std 0.4 -> normalised [1, 0] and [-1]
    np.testing.assert_allclose(adv[0], [1.0, 0.0], atol=1e-5)
    np.testing.assert_allclose(adv[1], [-1.0], atol=1e-5)


def test_groups_are_independent_and_outputs_float32():
    adv = process_advantages(STEPS + STEPS[::-1], OUT + OUT[::-1], 2)
    np.testing.assert_allclose(adv[0], adv[3], rtol=1e-6)
    assert all(a.dtype == np.float32 for a in adv)


def test_steps_to_tokens():
    vals = [np.array([0.5, -1.0]), np.array([2.0])]
    ids = np.array([[-1, 0, 0, 1, 1, -1], [-1, -1, 0, 0, -1, -1]])
    out = steps_to_tokens(vals, ids)
    np.testing.assert_array_equal(out, [[0, 0.5, 0.5, -1, -1, 0], [0, 0, 2, 2, 0, 0]])
    with pytest.raises(ValueError, match="refers to step 1"):
        steps_to_tokens(vals, np.array([[0, 1], [0, 1]]))
    with pytest.raises(ValueError, match="N=2"):
        steps_to_tokens(vals, ids[:1])


def test_errors():
    with pytest.raises(ValueError, match="variant"):
        process_advantages(STEPS, OUT, 2, variant="prime")
    with pytest.raises(ValueError, match="one outcome per response"):
        process_advantages(STEPS, [1.0], 2)
    with pytest.raises(ValueError, match="multiple of group_size=3"):
        process_advantages(STEPS, OUT, 3)
    with pytest.raises(ValueError, match="ddof"):
        process_advantages(STEPS, OUT, 1)


# --- torch tier: Reward-SQL's step advantage written in torch from the paper / released-code description ---


def _torch_refs(torch):
    def zscore(x):
        return (x - x.mean()) / (x.std() + 1e-6)  # torch.std is Bessel-corrected

    def paper(steps, out, g):
        r = torch.stack([torch.tensor(s).mean() + o for s, o in zip(steps, out)])
        a = torch.cat([zscore(c) for c in r.view(-1, g)])
        return [
            torch.where(a[i] > 0, a[i] * torch.tensor(s), a[i] * (1 - torch.tensor(s))) for i, s in enumerate(steps)
        ]

    def released(steps, out, g, rm=1.0):
        tok = [rm * torch.tensor(s) + o for s, o in zip(steps, out)]
        r = torch.stack([torch.unique(t[t != 0]).mean() for t in tok])
        a = torch.cat([zscore(c) for c in r.view(-1, g)])
        res = []
        for ai, t in zip(a, tok):
            pos = torch.where(t > 1, (t - 1) * ai, t * ai)
            res.append(torch.where(ai > 0, pos, (1 - t) * ai))
        return res

    def deepseekmath(steps, out, g):
        res = []
        for k in range(0, len(steps), g):
            group = [torch.tensor(s) for s in steps[k : k + g]]
            flat = torch.cat(group)
            for s in group:
                res.append(torch.flip(torch.cumsum(torch.flip((s - flat.mean()) / (flat.std() + 1e-6), [0]), 0), [0]))
        return res

    return {"paper": paper, "released": released, "deepseekmath": deepseekmath}


@pytest.mark.parametrize("variant", ["paper", "released", "deepseekmath"])
def test_parity_with_torch_reference(variant):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    g, n = 4, 12
    steps = [rng.uniform(0.05, 1.0, size=rng.integers(1, 6)).astype(np.float32).tolist() for _ in range(n)]
    out = rng.integers(0, 2, size=n).astype(np.float32)
    ref = _torch_refs(torch)[variant](steps, torch.tensor(out), g)
    got = process_advantages(steps, out, g, variant=variant)
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-6, atol=1e-6)


def test_deepseekmath_needs_enough_steps_for_a_std():
    with pytest.raises(ValueError, match="ddof=1"):
        process_advantages([[0.5], []], [1.0, 0.0], 2, variant="deepseekmath")
    adv = process_advantages([[0.5], []], [1.0, 0.0], 2, variant="deepseekmath", ddof=0)
    assert adv[1].shape == (0,) and adv[0][0] == 0.0
