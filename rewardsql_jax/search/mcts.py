"""Generic Monte-Carlo tree search with PUCT or UCT selection (host side, pure Python).

Used for Reward-SQL's PRM labels (``omega_prm`` shares the PUCT exploration term) and meant for
SQLConductor's workflow search, where a state is a partial workflow, an action is the next module
call (any hashable move) and the transition runs that module. One simulation is the textbook loop:

1. **selection** — from the root, follow the child with the highest score until a node that is not
   expanded yet (or is terminal). PUCT (AlphaZero; Silver et al. 2017):
   ``Q(s,a) + c_puct * P(s,a) * sqrt(N(s)) / (1 + N(s,a))``; UCT (Kocsis & Szepesvari 2006):
   ``Q(s,a) + c * sqrt(ln N(s) / N(s,a))`` with unvisited children first.
2. **expansion** — list the node's legal actions and their priors; children are created lazily:
   a child's state is computed by ``transition`` only when the child is first selected, so an
   expensive transition (an LLM call) runs once per tree edge, and only for edges the search visits.
3. **simulation** — the value of the reached node: ``reward(state)`` if it is terminal, else the
   user's ``rollout(state, rng)`` (default: uniformly random moves to a terminal state).
4. **backpropagation** — every node on the path gets ``visits += 1`` and ``value_sum += value``.

Values are from one agent's point of view (no sign flip between plies). Ties between equal scores are
broken by a ``numpy`` generator seeded from the config, so a search is deterministic given the seed
and deterministic callables. Tree nodes are mutable by nature (the search updates their statistics
in place); everything else is a frozen dataclass or a pure function.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class MCTSConfig:
    """Search options.

    ``selection``: "puct" or "uct"; ``c``: the exploration constant of either; ``num_simulations``:
    simulations per search; ``max_depth``: a node this deep is not expanded (it is evaluated by the
    rollout, which also stops after ``max_rollout_steps`` moves); ``unvisited_value``: Q used for a
    child with no visits under PUCT ("first-play urgency"); ``seed``: tie-breaking and rollout RNG.
    """

    num_simulations: int = 100
    c: float = 1.0
    selection: str = "puct"
    max_depth: int = 64
    max_rollout_steps: int = 64
    unvisited_value: float = 0.0
    seed: int = 0

    def __post_init__(self):
        if self.selection not in ("puct", "uct"):
            raise ValueError(f"MCTSConfig.selection={self.selection!r}; choose 'puct' or 'uct'")
        for name in ("num_simulations", "max_depth", "max_rollout_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"MCTSConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.c < 0:
            raise ValueError(f"MCTSConfig.c must be >= 0, got {self.c}")


@dataclasses.dataclass(frozen=True)
class SearchProblem:
    """The environment, as callables.

    actions(state) -> sequence of hashable moves (empty = terminal); transition(state, action) -> state;
    reward(state) -> float, the value of a terminal state; is_terminal(state) -> bool (default: no legal actions); priors(state, actions) -> one
    non-negative weight per action, normalised here (default uniform); rollout(state, rng) -> float,
    the simulated value of a non-terminal state (default: random playout, see ``random_rollout``).
    """

    actions: Callable[[Any], Sequence[Hashable]]
    transition: Callable[[Any, Hashable], Any]
    reward: Callable[[Any], float]
    is_terminal: Callable[[Any], bool] | None = None
    priors: Callable[[Any, Sequence[Hashable]], Sequence[float]] | None = None
    rollout: Callable[[Any, np.random.Generator], float] | None = None


@dataclasses.dataclass(eq=False)
class Node:
    """One tree node. ``state`` is None until the node is first selected (lazy transition)."""

    action: Hashable = None
    prior: float = 1.0
    parent: Node | None = None
    state: Any = None
    materialised: bool = False
    depth: int = 0
    visits: int = 0
    value_sum: float = 0.0
    children: dict = dataclasses.field(default_factory=dict)  # action -> Node, in action order
    expanded: bool = False
    terminal: bool = False

    @property
    def q(self) -> float:
        """Mean backed-up value (0 for an unvisited node)."""
        return self.value_sum / self.visits if self.visits else 0.0


@dataclasses.dataclass(frozen=True)
class MCTSResult:
    """``root`` (the whole tree), the root's most visited action, visit counts and mean values of the
    root's children (in action order), the most-visited path from the root, and the simulations this
    call ran (``root.visits`` also counts those of an earlier search continued with ``root=``)."""

    root: Node
    best_action: Hashable
    visit_counts: dict
    q_values: dict
    principal_variation: tuple
    simulations: int


def puct_exploration(parent_visits: float, visits: float, c_puct: float, prior: float = 1.0) -> float:
    """PUCT exploration bonus ``c_puct * prior * sqrt(parent_visits) / (1 + visits)``.

    With ``prior = 1`` and ``parent_visits = sum_i N(s_i)`` this is OmegaPRM's U(s) (Luo et al. 2024, Eq. 4).
    """
    return c_puct * prior * math.sqrt(parent_visits) / (1.0 + visits)


def puct_score(q: float, prior: float, parent_visits: float, visits: float, c_puct: float) -> float:
    """AlphaZero PUCT: ``q + c_puct * prior * sqrt(parent_visits) / (1 + visits)``."""
    return q + puct_exploration(parent_visits, visits, c_puct, prior)


def uct_score(q: float, parent_visits: float, visits: float, c: float) -> float:
    """UCT (UCB1 on trees): ``q + c * sqrt(ln parent_visits / visits)``; +inf for an unvisited child."""
    if visits == 0:
        return math.inf
    return q + c * math.sqrt(math.log(max(parent_visits, 1.0)) / visits)


def _argmax(scores: Sequence[float], rng: np.random.Generator) -> int:
    """Index of the best score; exact ties are broken uniformly at random (seeded)."""
    best = max(scores)
    tied = [i for i, s in enumerate(scores) if s == best]
    return tied[0] if len(tied) == 1 else tied[int(rng.integers(len(tied)))]


def _terminal(problem: SearchProblem, state, actions=None) -> bool:
    if problem.is_terminal is not None:
        return bool(problem.is_terminal(state))
    return len(problem.actions(state) if actions is None else actions) == 0


def random_rollout(problem: SearchProblem, state, rng: np.random.Generator, max_steps: int = 64) -> float:
    """Play uniformly random legal moves until a terminal state (or ``max_steps``), return its reward."""
    for _ in range(max_steps):
        actions = list(problem.actions(state))
        if _terminal(problem, state, actions) or not actions:
            break
        state = problem.transition(state, actions[int(rng.integers(len(actions)))])
    return float(problem.reward(state))


def select_child(node: Node, config: MCTSConfig, rng: np.random.Generator) -> Node:
    """The child of an expanded ``node`` with the highest PUCT / UCT score."""
    kids = list(node.children.values())
    if config.selection == "puct":
        scores = [
            puct_score(k.q if k.visits else config.unvisited_value, k.prior, node.visits, k.visits, config.c)
            for k in kids
        ]
    else:
        scores = [uct_score(k.q, node.visits, k.visits, config.c) for k in kids]
    return kids[_argmax(scores, rng)]


def _materialise(node: Node, problem: SearchProblem) -> None:
    assert node.parent is not None  # only expanded children are materialised; the root has its state
    node.state = problem.transition(node.parent.state, node.action)
    node.materialised = True


def _expand(node: Node, problem: SearchProblem, config: MCTSConfig) -> None:
    actions = list(problem.actions(node.state))
    node.terminal = _terminal(problem, node.state, actions)
    if node.terminal or node.depth >= config.max_depth or not actions:
        return
    if problem.priors is None:
        weights = np.ones(len(actions))
    else:
        weights = np.asarray(problem.priors(node.state, actions), dtype=np.float64)
        if weights.shape != (len(actions),) or (weights < 0).any() or not np.isfinite(weights).all():
            raise ValueError(
                f"priors(state, actions) must return {len(actions)} finite non-negative weights "
                f"(one per action), got {weights.tolist()}"
            )
    total = weights.sum()
    weights = weights / total if total > 0 else np.full(len(actions), 1.0 / len(actions))
    if len(set(actions)) != len(actions):
        raise ValueError(f"actions(state) returned duplicate moves {actions}; moves must be distinct hashables")
    node.children = {
        a: Node(action=a, prior=float(w), parent=node, depth=node.depth + 1) for a, w in zip(actions, weights)
    }
    node.expanded = True


def _evaluate(node: Node, problem: SearchProblem, config: MCTSConfig, rng: np.random.Generator) -> float:
    if node.terminal:
        return float(problem.reward(node.state))
    if problem.rollout is not None:
        return float(problem.rollout(node.state, rng))
    return random_rollout(problem, node.state, rng, config.max_rollout_steps)


def simulate(root: Node, problem: SearchProblem, config: MCTSConfig, rng: np.random.Generator) -> float:
    """One selection / expansion / simulation / backpropagation pass; returns the backed-up value."""
    node, path = root, [root]
    while node.expanded and not node.terminal:
        node = select_child(node, config, rng)
        path.append(node)
        if not node.materialised:
            _materialise(node, problem)
            break
    if not node.expanded and not node.terminal:
        _expand(node, problem, config)
    value = _evaluate(node, problem, config, rng)
    for n in path:
        n.visits += 1
        n.value_sum += value
    return value


def principal_variation(root: Node) -> tuple:
    """Actions along the most visited child at every level (ties: first in action order)."""
    path, node = [], root
    while node.children:
        visited = [k for k in node.children.values() if k.visits]
        if not visited:
            break
        node = max(visited, key=lambda k: k.visits)
        path.append(node.action)
    return tuple(path)


def mcts_search(
    root_state, problem: SearchProblem, config: MCTSConfig = MCTSConfig(), *, root: Node | None = None
) -> MCTSResult:
    """Run ``config.num_simulations`` simulations from ``root_state`` (or continue an existing ``root``
    tree, e.g. after committing to a move) and report the root's statistics."""
    rng = np.random.default_rng(config.seed)
    if root is None:
        root = Node(state=root_state, materialised=True)
    runs = 0
    for _ in range(config.num_simulations):
        simulate(root, problem, config, rng)
        runs += 1
        if root.terminal:
            break
    visits = {a: k.visits for a, k in root.children.items()}
    best = max(visits, key=visits.__getitem__) if visits and max(visits.values()) > 0 else None
    return MCTSResult(
        root=root,
        best_action=best,
        visit_counts=visits,
        q_values={a: k.q for a, k in root.children.items()},
        principal_variation=principal_variation(root),
        simulations=runs,
    )
