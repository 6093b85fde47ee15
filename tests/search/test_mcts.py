"""Generic MCTS / PUCT (rewardsql_jax.search.mcts): score formulas, selection, backpropagation, convergence."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rewardsql_jax.search.mcts import (
    MCTSConfig,
    Node,
    SearchProblem,
    mcts_search,
    principal_variation,
    puct_exploration,
    puct_score,
    select_child,
    uct_score,
)

TARGET = ("b", "c", "a")


def _word_problem(target=TARGET, alphabet=("a", "b", "c"), transitions=None):
    """Spell a word of len(target) letters; reward = fraction of positions matching ``target``."""

    def transition(state, action):
        if transitions is not None:
            transitions.append((state, action))
        return state + (action,)

    return SearchProblem(
        actions=lambda s: () if len(s) == len(target) else alphabet,
        transition=transition,
        reward=lambda s: sum(x == y for x, y in zip(s, target)) / len(target),
    )


def test_puct_and_uct_formulas():
    assert puct_score(0.5, 0.25, 16, 3, 2.0) == pytest.approx(0.5 + 2.0 * 0.25 * 4.0 / 4.0)
    assert puct_exploration(9, 2, 0.125) == pytest.approx(0.125 * 3.0 / 3.0)
    assert uct_score(0.5, 10, 4, 1.5) == pytest.approx(0.5 + 1.5 * math.sqrt(math.log(10) / 4))
    assert uct_score(0.0, 10, 0, 1.0) == math.inf


def _parent(children):
    parent = Node(state=(), materialised=True, expanded=True, visits=sum(v for _, v, _, _ in children) + 1)
    for action, visits, value_sum, prior in children:
        parent.children[action] = Node(
            action=action, prior=prior, parent=parent, visits=visits, value_sum=value_sum, depth=1
        )
    return parent


def test_select_child_follows_puct_scores():
    # parent visits 11: scores x = 0.5 + 1*0.2*sqrt(11)/5, y = 0.2 + 1*0.7*sqrt(11)/3, z = 0 + 0.1*sqrt(11)/1
    parent = _parent([("x", 4, 2.0, 0.2), ("y", 2, 0.4, 0.7), ("z", 0, 0.0, 0.1)])
    scores = {a: puct_score(k.q, k.prior, parent.visits, k.visits, 1.0) for a, k in parent.children.items()}
    assert max(scores, key=scores.get) == "y"
    rng = np.random.default_rng(0)
    assert select_child(parent, MCTSConfig(c=1.0), rng).action == "y"
    # with no exploration the best mean value wins
    assert select_child(parent, MCTSConfig(c=0.0), rng).action == "x"


def test_select_child_uct_tries_unvisited_first():
    parent = _parent([("x", 4, 3.9, 1 / 3), ("y", 2, 0.4, 1 / 3), ("z", 0, 0.0, 1 / 3)])
    assert select_child(parent, MCTSConfig(selection="uct"), np.random.default_rng(0)).action == "z"


@pytest.mark.parametrize("selection,c", [("puct", 1.0), ("uct", 0.5)])
def test_converges_on_toy_word_problem(selection, c):
    res = mcts_search((), _word_problem(), MCTSConfig(num_simulations=400, c=c, selection=selection, seed=1))
    assert res.best_action == TARGET[0]
    assert res.principal_variation == TARGET
    assert res.visit_counts[TARGET[0]] > max(v for a, v in res.visit_counts.items() if a != TARGET[0])
    assert res.q_values[TARGET[0]] > max(q for a, q in res.q_values.items() if a != TARGET[0])


def test_backpropagation_counts_and_sums():
    res = mcts_search((), _word_problem(), MCTSConfig(num_simulations=50, seed=3))
    root = res.root
    assert root.visits == res.simulations == 50
    # the root's first simulation evaluates the root itself; every later one passes through one child
    assert sum(k.visits for k in root.children.values()) == 49

    def check(node):
        if node.children and node.expanded:
            kids = sum(k.visits for k in node.children.values())
            assert node.visits - kids in (0, 1)
            for k in node.children.values():
                check(k)
        assert 0.0 <= node.value_sum <= node.visits  # rewards are in [0, 1]

    check(root)


def test_deterministic_given_seed_and_lazy_transitions():
    calls_a, calls_b = [], []
    a = mcts_search((), _word_problem(transitions=calls_a), MCTSConfig(num_simulations=60, seed=7))
    b = mcts_search((), _word_problem(transitions=calls_b), MCTSConfig(num_simulations=60, seed=7))
    assert a.visit_counts == b.visit_counts and a.q_values == b.q_values
    # tree edges are materialised once each (random-rollout transitions are separate, hence the filter)
    tree_edges = []

    def collect(node):
        for k in node.children.values():
            if k.materialised:
                tree_edges.append((node.state, k.action))
                collect(k)

    collect(a.root)
    assert len(tree_edges) == len(set(tree_edges))
    assert set(tree_edges) <= set(calls_a)


def test_priors_steer_puct_when_values_are_equal():
    flat = SearchProblem(
        actions=lambda s: () if s else ("p", "q", "r"),
        transition=lambda s, a: s + (a,),
        reward=lambda s: 0.0,
        priors=lambda s, acts: [0.7, 0.2, 0.1],
    )
    res = mcts_search((), flat, MCTSConfig(num_simulations=101, c=1.0))
    v = res.visit_counts
    assert v["p"] > v["q"] > v["r"] > 0
    assert res.root.children["p"].prior == pytest.approx(0.7)


def test_custom_rollout_and_terminal_root():
    seen = []

    def rollout(state, rng):
        seen.append(state)
        return 1.0 if state[:1] == ("b",) else 0.0

    prob = SearchProblem(
        actions=lambda s: () if len(s) == 3 else ("a", "b"),
        transition=lambda s, a: s + (a,),
        reward=lambda s: 0.0,
        rollout=rollout,
    )
    res = mcts_search((), prob, MCTSConfig(num_simulations=30, c=0.5))
    assert res.best_action == "b" and seen
    done = mcts_search(("x",) * 3, prob, MCTSConfig(num_simulations=30))
    assert done.best_action is None and done.simulations == 1 and done.root.terminal


def test_bad_inputs_give_clear_errors():
    with pytest.raises(ValueError, match="selection"):
        MCTSConfig(selection="ucb")
    with pytest.raises(ValueError, match="num_simulations"):
        MCTSConfig(num_simulations=0)
    bad = SearchProblem(
        actions=lambda s: () if s else ("a", "b"),
        transition=lambda s, a: s + (a,),
        reward=lambda s: 0.0,
        priors=lambda s, acts: [1.0],
    )
    with pytest.raises(ValueError, match="priors"):
        mcts_search((), bad, MCTSConfig(num_simulations=3))
    dup = SearchProblem(
        actions=lambda s: () if s else ("a", "a"), transition=lambda s, a: s + (a,), reward=lambda s: 0.0
    )
    with pytest.raises(ValueError, match="duplicate"):
        mcts_search((), dup, MCTSConfig(num_simulations=3))


def test_principal_variation_of_unvisited_tree_is_empty():
    assert principal_variation(Node(state=())) == ()


def test_search_can_continue_an_existing_tree():
    prob = _word_problem()
    first = mcts_search((), prob, MCTSConfig(num_simulations=20, seed=0))
    again = mcts_search(None, prob, MCTSConfig(num_simulations=30, seed=1), root=first.root)
    assert again.simulations == 30 and again.root.visits == 50
    # after committing to the best first letter, the subtree is reused as the new root
    sub = again.root.children[again.best_action]
    before = sub.visits
    cont = mcts_search(None, prob, MCTSConfig(num_simulations=10), root=sub)
    assert cont.root.visits == before + 10 and cont.root.state == (again.best_action,)
