"""OmegaPRM-style Monte-Carlo step labels for Chain-of-CTE rollouts (Reward-SQL Sec. 4.2; Luo et al. 2024).

Reward-SQL labels the steps of policy-sampled CoCTEs "following OmegaPRM": a step is *correct* when some
completion from the prefix ending at it reaches the gold result, i.e. its Monte-Carlo estimate
``MC(prefix)`` = fraction of ``k`` completions that are correct is > 0 (Sec. 4.2, "a step is correct when
c_i can reach a SQL matching the ground truth"). Every step before the first wrong one is labelled 1, the
first wrong step and all later ones 0.

The search (OmegaPRM, Algorithm 1):

* a *node* is a step prefix with its ``MC`` and visit count ``N``; a *candidate* is an incorrect rollout
  ``r`` hanging off a node ``s`` (its steps after ``s``);
* **selection** takes the candidate maximising ``Q(s, r) + U(s)`` with ``Q(s, r) = alpha^(1 - MC(s)) *
  beta^(len(r) / L)`` (prefer nodes that look right yet produced a wrong rollout, and short rollouts) and
  ``U(s) = c_puct * sqrt(sum_i N(s_i)) / (1 + N(s))`` (``mcts.puct_exploration`` with prior 1);
* **binary search** on the selected rollout for its first wrong step: ``s`` is known correct and the full
  rollout is known wrong, so ``ceil(log2 len(r))`` MC evaluations at midpoints suffice (MC > 0: the error
  is later; MC = 0: it is at or before the midpoint). Every evaluated prefix becomes a node; the
  incorrect completions of a node with ``0 < MC < 1`` become new candidates, correct completions become
  all-positive labelled rollouts;
* **maintenance**: ``N(s) += 1`` for the selected node; repeat for ``search_budget`` iterations or until
  no candidate is left.

Deviation from OmegaPRM, on purpose: the empty prefix (the question) counts as correct even when
``MC(root) = 0`` (the question has a gold answer), so a weak policy whose rollouts are all wrong still
yields labels (OmegaPRM drops such questions).

The search is a generator that *yields* ``MCRequest(prefix, k)`` and is *sent* the judged completions, so
a driver can batch the requests of many questions into one generation call and one execution batch
(``run_searches``); ``label_rollouts`` drives one search with plain callables.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Generator, Sequence

from .mcts import puct_exploration


@dataclasses.dataclass(frozen=True)
class OmegaPRMConfig:
    """Paper values (Reward-SQL, following OmegaPRM): k=16, c_puct 0.125, alpha 0.5, beta 0.9, L 500."""

    completions_per_step: int = 16  # k
    c_puct: float = 0.125
    alpha: float = 0.5
    beta: float = 0.9
    length_scale: float = 500.0  # L
    search_budget: int = 8  # selection + binary-search iterations per question

    def __post_init__(self):
        for name in ("completions_per_step", "search_budget", "length_scale"):
            if getattr(self, name) <= 0:
                raise ValueError(f"OmegaPRMConfig.{name} must be positive, got {getattr(self, name)}")
        for name in ("alpha", "beta"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise ValueError(f"OmegaPRMConfig.{name} must be in (0, 1], got {getattr(self, name)}")
        if self.c_puct < 0:
            raise ValueError(f"OmegaPRMConfig.c_puct must be >= 0, got {self.c_puct}")


@dataclasses.dataclass(frozen=True)
class Rollout:
    """A complete response as its steps, and whether it reaches the gold result."""

    steps: tuple
    correct: bool


@dataclasses.dataclass(frozen=True)
class MCRequest:
    """Ask for ``k`` completions continuing ``prefix``; answer with ``k`` judged ``Rollout``s whose steps
    start with ``prefix``."""

    prefix: tuple
    k: int


@dataclasses.dataclass(frozen=True)
class LabelledRollout:
    """Steps with 0/1 labels. ``first_wrong`` is the index of the first wrong step (None: all correct);
    ``source``: "rollout" (a given correct rollout), "completion" (a correct completion found while
    estimating MC) or "search" (binary search)."""

    steps: tuple
    labels: tuple
    first_wrong: int | None
    source: str


@dataclasses.dataclass(frozen=True)
class PrefixEstimate:
    """A search-tree node: a step prefix, its Monte-Carlo estimate and how often it was selected."""

    prefix: tuple
    mc: float
    visits: int


@dataclasses.dataclass(frozen=True)
class OmegaPRMResult:
    """The labelled rollouts of one question, the tree's nodes and the search's cost counters."""

    labelled: tuple
    nodes: tuple
    mc_evaluations: int
    completions: int
    iterations: int


def word_length(steps: Sequence[str]) -> int:
    """Default ``len(r)``: whitespace-separated words of the rollout's steps (a tokenizer-free token count)."""
    return sum(len(s.split()) for s in steps)


def rollout_value(mc: float, length: float, config: OmegaPRMConfig) -> float:
    """OmegaPRM's ``Q(s, r) = alpha^(1 - MC(s)) * beta^(len(r) / L)``."""
    return config.alpha ** (1.0 - mc) * config.beta ** (length / config.length_scale)


def selection_score(mc: float, length: float, visits: int, total_visits: int, config: OmegaPRMConfig) -> float:
    """``Q(s, r) + U(s)`` with ``U(s) = c_puct * sqrt(sum_i N(s_i)) / (1 + N(s))`` (OmegaPRM selection)."""
    return rollout_value(mc, length, config) + puct_exploration(total_visits, visits, config.c_puct)


def step_labels(num_steps: int, first_wrong: int | None) -> tuple:
    """1 for every step before ``first_wrong``, 0 from it on (all 1 when ``first_wrong`` is None)."""
    if first_wrong is None:
        return (1,) * num_steps
    if not 0 <= first_wrong < num_steps:
        raise ValueError(f"first_wrong={first_wrong} is outside 0..{num_steps - 1}")
    return (1,) * first_wrong + (0,) * (num_steps - first_wrong)


def is_positive(mc: float) -> bool:
    """Reward-SQL's step rule: correct when some completion reaches the gold result (MC > 0)."""
    return mc > 0.0 and not math.isnan(mc)


@dataclasses.dataclass
class _Node:
    mc: float
    visits: int = 0


def _check_answer(req: MCRequest, answer) -> list:
    answer = list(answer or [])
    if not answer:
        raise ValueError(
            f"no completions for MCRequest(prefix of {len(req.prefix)} steps): return {req.k} judged Rollouts"
        )
    for a in answer:
        if not isinstance(a, Rollout) or tuple(a.steps[: len(req.prefix)]) != tuple(req.prefix):
            raise ValueError("each completion must be a Rollout whose steps start with the requested prefix")
    return answer


def omega_prm_search(
    rollouts: Sequence[Rollout],
    config: OmegaPRMConfig = OmegaPRMConfig(),
    *,
    length_fn: Callable[[tuple], float] = word_length,
) -> Generator[MCRequest, list, OmegaPRMResult]:
    """Label one question's ``rollouts`` (judged, non-empty step tuples) by OmegaPRM search.

    Yields ``MCRequest``s, expects the judged completions sent back, returns an ``OmegaPRMResult``.
    Every rollout is labelled at most once (identical step tuples are merged).
    """
    rollouts = [Rollout(tuple(r.steps), bool(r.correct)) for r in rollouts]
    if any(not r.steps for r in rollouts):
        raise ValueError("every rollout needs at least one step; drop empty responses first")
    tree: dict[tuple, _Node] = {(): _Node(mc=sum(r.correct for r in rollouts) / max(len(rollouts), 1))}
    pool: list[tuple[tuple, tuple]] = []  # (node prefix, rollout steps after it)
    labelled: dict[tuple, LabelledRollout] = {}
    seen: set = set()  # full rollouts already queued or labelled
    counters = {"mc": 0, "completions": 0}

    def add_correct(steps, source):
        if steps not in labelled:
            labelled[steps] = LabelledRollout(steps, step_labels(len(steps), None), None, source)
        seen.add(steps)

    def add_candidate(prefix, steps):
        if len(steps) > len(prefix) and steps not in seen:
            seen.add(steps)
            pool.append((prefix, steps[len(prefix) :]))

    for r in rollouts:
        if r.correct:
            add_correct(r.steps, "rollout")
        else:
            add_candidate((), r.steps)

    iterations = 0
    while pool and iterations < config.search_budget:
        iterations += 1
        total = sum(n.visits for n in tree.values())
        scores = [selection_score(tree[p].mc, length_fn(r), tree[p].visits, total, config) for p, r in pool]
        prefix, suffix = pool.pop(max(range(len(pool)), key=scores.__getitem__))
        tree[prefix].visits += 1
        full = prefix + suffix
        lo, hi = len(prefix), len(full)  # full[:lo] reaches gold (or is the question); full is wrong
        while hi - lo > 1:
            mid = (lo + hi) // 2
            cand = full[:mid]
            if cand not in tree:
                req = MCRequest(cand, config.completions_per_step)
                answer = _check_answer(req, (yield req))
                counters["mc"] += 1
                counters["completions"] += len(answer)
                mc = sum(a.correct for a in answer) / len(answer)
                tree[cand] = _Node(mc=mc)
                for a in answer:
                    steps = tuple(a.steps)
                    if a.correct:
                        add_correct(steps, "completion")
                    elif is_positive(mc):  # MC = 0: the node is wrong, nothing below it to search
                        add_candidate(cand, steps)
            if is_positive(tree[cand].mc):
                lo = mid
            else:
                hi = mid
        labelled[full] = LabelledRollout(full, step_labels(len(full), hi - 1), hi - 1, "search")
    nodes = tuple(PrefixEstimate(p, n.mc, n.visits) for p, n in tree.items())
    return OmegaPRMResult(
        labelled=tuple(labelled.values()),
        nodes=nodes,
        mc_evaluations=counters["mc"],
        completions=counters["completions"],
        iterations=iterations,
    )


def run_searches(
    searches: Sequence[Generator[MCRequest, list, OmegaPRMResult]], answer_batch: Callable[[list], list]
) -> list:
    """Drive many searches in lock-step: each round gathers every live search's pending ``MCRequest`` and
    answers them with one ``answer_batch([(search index, request), ...]) -> [completions per request]``
    call, then resumes them. Returns the searches' results in order; the number of rounds is the largest
    number of MC evaluations of any one search."""
    results: list = [None] * len(searches)
    pending: dict[int, MCRequest] = {}

    def advance(i, answer):
        try:
            pending[i] = searches[i].send(answer)
        except StopIteration as stop:
            results[i] = stop.value

    for i in range(len(searches)):
        advance(i, None)
    while pending:
        items = list(pending.items())
        answers = answer_batch(items)
        if len(answers) != len(items):
            raise ValueError(f"answer_batch returned {len(answers)} answers for {len(items)} requests")
        pending.clear()
        for (i, _), answer in zip(items, answers):
            advance(i, answer)
    return results


def label_rollouts(
    rollouts: Sequence[Sequence[str]],
    complete: Callable[[tuple, int], Sequence[Sequence[str]]],
    is_correct: Callable[[tuple], bool],
    config: OmegaPRMConfig = OmegaPRMConfig(),
    *,
    length_fn: Callable[[tuple], float] = word_length,
) -> OmegaPRMResult:
    """OmegaPRM labels for one question with plain callables.

    ``rollouts``: step sequences of the policy's responses; ``complete(prefix, k)``: ``k`` continuations of
    ``prefix``, each the steps *after* the prefix; ``is_correct(steps)``: whether the full response
    reaches the gold result.
    """

    def judge(steps):
        return Rollout(tuple(steps), bool(is_correct(tuple(steps))))

    search = omega_prm_search([judge(r) for r in rollouts], config, length_fn=length_fn)
    return run_searches(
        [search], lambda items: [[judge(r.prefix + tuple(c)) for c in complete(r.prefix, r.k)] for _, r in items]
    )[0]
