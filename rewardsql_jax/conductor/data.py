"""Questions for the conductor pipeline: the built-in benchmark, optionally with misspelt values.

The built-in questions quote stored values exactly. ``add_value_typos`` rewrites a fraction of the
questions so that a quoted string value is misspelt (e.g. "Brazil" -> "Brasil"), the surface-form mismatch
of the paper's Figure 9 case study; the gold SQL keeps the stored value, so answering needs relevant-value
retrieval (or luck). Typos are seeded per question id and applied to train and test alike.

``evaluation_split`` picks the evaluation questions (``data.eval_on``): held-out questions of the training
databases, or the benchmark's unseen test databases.
"""

from __future__ import annotations

import dataclasses
import random
import re

from rewardsql_jax.data.examples import Example

EVAL_SPLITS = ("heldout_questions", "test_dbs")
_LITERAL = re.compile(r"'((?:[^']|'')*)'")
_VOWELS = "aeiou"


def misspell(word: str, rng: random.Random) -> str:
    """A plausible misspelling of ``word`` (length >= 4): a vowel swapped, adjacent letters transposed,
    or one letter doubled / replaced; never equal to ``word`` ignoring case."""
    for _ in range(20):
        chars = list(word)
        i = rng.randrange(1, len(chars) - 1)
        op = rng.randrange(3)
        if op == 0 and chars[i].lower() in _VOWELS:
            chars[i] = rng.choice([v for v in _VOWELS if v != chars[i].lower()])
        elif op == 1:
            chars[i], chars[i + 1] = chars[i + 1], chars[i]
        else:
            chars[i] = {"s": "z", "z": "s", "c": "k", "k": "c", "i": "y", "y": "i"}.get(chars[i], chars[i] * 2)
        out = "".join(chars)
        if out.lower() != word.lower():
            return out
    return word[:-1] + ("x" if word[-1] != "x" else "y")


def typo_question(ex: Example, rng: random.Random) -> Example | None:
    """``ex`` with one quoted string value of its gold SQL misspelt in the question, or None if none fits."""
    literals = [m.replace("''", "'") for m in _LITERAL.findall(ex.gold_sql)]
    literals = [v for v in literals if "%" not in v and v in ex.question and any(len(w) >= 4 for w in v.split())]
    if not literals:
        return None
    value = rng.choice(literals)
    words = value.split()
    k = rng.choice([i for i, w in enumerate(words) if len(w) >= 4])
    words[k] = misspell(words[k], rng)
    return dataclasses.replace(ex, question=ex.question.replace(value, " ".join(words), 1))


def add_value_typos(examples, rate: float, seed: int = 0) -> tuple:
    """Misspell a quoted value in a fraction ``rate`` of the questions that have one."""
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"value typo rate must be in [0, 1], got {rate}")
    out = []
    for ex in examples:
        rng = random.Random(f"conductor.typo:{seed}:{ex.question_id}")
        changed = typo_question(ex, rng) if rng.random() < rate else None
        out.append(changed or ex)
    return tuple(out)


def heldout_split(examples, every: int) -> tuple[list, list]:
    """(train, held out): per database, the questions at positions k with k % every == every - 1 are held out."""
    seen: dict[str, int] = {}
    train: list = []
    held: list = []
    for ex in examples:
        k = seen.get(ex.db_id, 0)
        seen[ex.db_id] = k + 1
        (held if k % every == every - 1 else train).append(ex)
    return train, held


def evaluation_split(
    train_examples,
    test_examples,
    *,
    eval_on: str,
    heldout_every: int,
    max_eval_questions: int,
    value_typo_rate: float,
    seed: int,
) -> tuple[list, list]:
    """(training questions, evaluation questions), both with value typos (``add_value_typos``).

    ``eval_on="heldout_questions"``: every ``heldout_every``-th question of each training database is held out
    (unseen questions and values, seen schemas) and the rest train. ``"test_dbs"``: every training question
    trains and the evaluation runs on the benchmark's test databases (schemas never seen in training). At most
    ``max_eval_questions`` (0 = all), evenly spaced so that every database stays in.
    """
    if eval_on not in EVAL_SPLITS:
        raise ValueError(f"data.eval_on={eval_on!r}; choose one of {', '.join(EVAL_SPLITS)}")
    train = list(add_value_typos(train_examples, value_typo_rate, seed))
    if eval_on == "heldout_questions":
        train, held = heldout_split(train, heldout_every)
    else:
        held = list(add_value_typos(test_examples, value_typo_rate, seed))
    if max_eval_questions and len(held) > max_eval_questions:
        stride = len(held) / max_eval_questions
        held = [held[int(i * stride)] for i in range(max_eval_questions)]
    return train, held
