"""OmegaPRM step labelling (rewardsql_jax.search.omega_prm) on a fake deterministic world (no model)."""

from __future__ import annotations

import math

import pytest

from rewardsql_jax.search.omega_prm import (
    MCRequest,
    OmegaPRMConfig,
    Rollout,
    label_rollouts,
    omega_prm_search,
    rollout_value,
    run_searches,
    selection_score,
    step_labels,
)


class World:
    """Gold solution ``g0 .. g{n-1}``; a prefix reaches gold iff it is a gold prefix, and then exactly
    ``good`` of its ``k`` completions continue with the gold steps (the others go wrong)."""

    def __init__(self, n: int, good: int = 1):
        self.gold = tuple(f"g{i}" for i in range(n))
        self.good = good
        self.calls: list[tuple] = []

    def rollout(self, first_wrong: int, tag: str = "x") -> tuple:
        return self.gold[:first_wrong] + tuple(f"{tag}{i}" for i in range(first_wrong, len(self.gold)))

    def complete(self, prefix: tuple, k: int):
        self.calls.append(prefix)
        m = len(prefix)
        wrong = [tuple(f"w{m}_{j}_{i}" for i in range(m, len(self.gold))) or (f"w{m}_{j}",) for j in range(k)]
        if prefix == self.gold[:m]:
            return [self.gold[m:]] * min(self.good, k) + wrong[: k - min(self.good, k)]
        return wrong

    def is_correct(self, steps: tuple) -> bool:
        return steps == self.gold


def _searched(result):
    return [r for r in result.labelled if r.source == "search"]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 16, 33])
def test_binary_search_finds_first_wrong_step_in_log_n(n):
    for w in range(n):
        world = World(n)
        res = label_rollouts(
            [world.rollout(w)],
            world.complete,
            world.is_correct,
            OmegaPRMConfig(completions_per_step=4, search_budget=1),
        )
        (lab,) = _searched(res)
        assert lab.first_wrong == w
        assert lab.labels == (1,) * w + (0,) * (n - w)
        assert lab.steps == world.rollout(w)
        assert res.mc_evaluations == len(world.calls) <= math.ceil(math.log2(n))
        assert res.completions == 4 * res.mc_evaluations
        assert res.iterations == 1


def test_mc_estimates_and_completion_labels():
    world = World(4, good=2)
    res = label_rollouts(
        [world.rollout(2)], world.complete, world.is_correct, OmegaPRMConfig(completions_per_step=4, search_budget=1)
    )
    mc = {n.prefix: n.mc for n in res.nodes}
    assert mc[()] == 0.0  # the only given rollout is wrong
    assert mc[world.gold[:2]] == pytest.approx(0.5)  # 2 of 4 completions reach gold
    assert mc[world.rollout(2)[:3]] == 0.0
    # the correct completion found while estimating is an all-positive example
    pos = [r for r in res.labelled if r.source == "completion"]
    assert [r.steps for r in pos] == [world.gold] and pos[0].labels == (1, 1, 1, 1) and pos[0].first_wrong is None


def test_correct_rollouts_are_all_positive_and_not_searched():
    world = World(3)
    res = label_rollouts([world.gold, world.gold], world.complete, world.is_correct, OmegaPRMConfig())
    assert len(res.labelled) == 1 and res.labelled[0].labels == (1, 1, 1) and res.labelled[0].source == "rollout"
    assert res.mc_evaluations == 0 and res.iterations == 0 and world.calls == []


def test_q_and_u_formulas():
    cfg = OmegaPRMConfig(c_puct=0.125, alpha=0.5, beta=0.9, length_scale=500)
    assert rollout_value(1.0, 0, cfg) == pytest.approx(1.0)
    assert rollout_value(0.5, 500, cfg) == pytest.approx(0.5**0.5 * 0.9)
    assert rollout_value(0.0, 250, cfg) == pytest.approx(0.5 * 0.9**0.5)
    # U(s) = c_puct * sqrt(sum N) / (1 + N(s))
    assert selection_score(0.25, 100, 3, 16, cfg) == pytest.approx(0.5**0.75 * 0.9**0.2 + 0.125 * 4 / 4)
    # a less visited node gets the larger exploration bonus
    assert selection_score(0.5, 10, 0, 9, cfg) > selection_score(0.5, 10, 5, 9, cfg)


def test_selection_prefers_short_rollouts_then_high_mc_nodes():
    world = World(6)
    long_r, short_r = world.rollout(1, "L"), world.rollout(1, "S")[:3]
    cfg = OmegaPRMConfig(completions_per_step=4, search_budget=1, length_scale=1.0, beta=0.5, c_puct=0.0)
    res = label_rollouts([long_r, short_r], world.complete, world.is_correct, cfg, length_fn=len)
    assert [r.steps for r in _searched(res)] == [short_r]
    # second iteration: the candidates hanging off the gold prefix (MC 1/4 > MC(root) = 0) win over the
    # remaining root rollout of the same length
    world = World(6)
    a, b = world.rollout(2, "A"), world.rollout(3, "B")
    cfg = OmegaPRMConfig(completions_per_step=4, search_budget=2, c_puct=0.0)
    res = label_rollouts([a, b], world.complete, world.is_correct, cfg, length_fn=lambda s: 0)
    first, second = _searched(res)
    assert first.steps == a and first.first_wrong == 2
    # it hangs off a gold prefix (g0, MC 1/4), not off the root
    assert second.steps[0] == "g0" and second.steps != b and second.first_wrong == 1


def test_wrong_node_adds_no_candidates_and_budget_bounds_iterations():
    world = World(8, good=0)  # nothing ever reaches gold: every MC is 0
    res = label_rollouts(
        [world.rollout(0), world.rollout(0, "y")],
        world.complete,
        world.is_correct,
        OmegaPRMConfig(completions_per_step=3, search_budget=5),
    )
    assert res.iterations == 2  # only the two given rollouts were candidates
    assert all(r.first_wrong == 0 and set(r.labels) == {0} for r in res.labelled)
    assert all(n.mc == 0.0 for n in res.nodes)


def test_budget_stops_the_search():
    world = World(8, good=1)
    res = label_rollouts(
        [world.rollout(5)], world.complete, world.is_correct, OmegaPRMConfig(completions_per_step=4, search_budget=3)
    )
    assert res.iterations == 3  # completions keep the pool non-empty; the budget ends it
    assert len(_searched(res)) == 3
    for lab in _searched(res):  # every searched label agrees with the world's truth
        truth = next(i for i, (s, g) in enumerate(zip(lab.steps, world.gold)) if s != g)
        assert lab.first_wrong == truth


def test_run_searches_batches_questions_in_lockstep():
    worlds = [World(n) for n in (4, 9, 2)]
    rollouts = [w.rollout(1) for w in worlds]
    cfg = OmegaPRMConfig(completions_per_step=2, search_budget=1)
    solo = [label_rollouts([r], w.complete, w.is_correct, cfg) for w, r in zip(worlds, rollouts)]
    worlds = [World(n) for n in (4, 9, 2)]
    searches = [omega_prm_search([Rollout(r, w.is_correct(r))], cfg) for w, r in zip(worlds, rollouts)]
    batches = []

    def answer_batch(items):
        batches.append(sorted(i for i, _ in items))
        return [
            [
                Rollout(r.prefix + tuple(c), worlds[i].is_correct(r.prefix + tuple(c)))
                for c in worlds[i].complete(r.prefix, r.k)
            ]
            for i, r in items
        ]

    batched = run_searches(searches, answer_batch)
    assert [r.labelled for r in batched] == [r.labelled for r in solo]
    assert [r.mc_evaluations for r in batched] == [r.mc_evaluations for r in solo] == [2, 3, 1]
    assert batches == [[0, 1, 2], [0, 1], [1]]  # one call per round, shrinking as searches finish


def test_errors_are_clear():
    with pytest.raises(ValueError, match="at least one step"):
        label_rollouts([()], lambda p, k: [], lambda s: False)
    search = omega_prm_search([Rollout(("a", "b"), False)], OmegaPRMConfig(completions_per_step=2))
    req = next(search)
    assert req == MCRequest(("a",), 2)
    with pytest.raises(ValueError, match="start with the requested prefix"):
        search.send([Rollout(("z", "b"), False)])
    search = omega_prm_search([Rollout(("a", "b"), False)])
    next(search)
    with pytest.raises(ValueError, match="no completions"):
        search.send([])
    with pytest.raises(ValueError, match="alpha"):
        OmegaPRMConfig(alpha=0.0)
    with pytest.raises(ValueError, match="search_budget"):
        OmegaPRMConfig(search_budget=0)
    with pytest.raises(ValueError, match="first_wrong"):
        step_labels(2, 2)
