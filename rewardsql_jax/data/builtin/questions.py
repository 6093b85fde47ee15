"""Question templates of the built-in benchmark: (kind, difficulty, template function).

A template takes a DbInstance and a random.Random and returns (question, gold SQL), drawing
its slot values from the generated rows so the answer is usually non-empty (generation still
executes every gold query and drops empty or failing ones). Difficulty is fixed per template:
simple = one table, no nesting; moderate = one join, grouping, HAVING, ordering with LIMIT,
combined filters; challenging = two joins, nested queries, set operations.
"""

from __future__ import annotations

import functools

from rewardsql_jax.data.builtin.instance import DbInstance

_AGGS = (("average", "AVG"), ("maximum", "MAX"), ("minimum", "MIN"), ("total", "SUM"))


def _lit(value) -> str:
    return "'" + str(value).replace("'", "''") + "'" if isinstance(value, str) else str(value)


def _a(noun: str) -> str:
    return f"an {noun}" if noun[0] in "aeiou" else f"a {noun}"


def _entity(rng) -> str:
    return rng.choice(("child", "child", "other", "parent"))


def _threshold(values, rng, low=0.2, high=0.8):
    ordered = sorted(values)
    return ordered[int(rng.uniform(low, high) * (len(ordered) - 1))]


def t_select(db: DbInstance, rng):
    r = _entity(rng)
    return (
        f"List the {db.phrase(r, 'name')} of all {db.noun(r, True)}.",
        f"SELECT {db.col(r, 'name')} FROM {db.table(r)}",
    )


def t_filter_eq(db, rng):
    r = rng.choice(("child", "other", "parent"))
    v = rng.choice(db.values(r, "cat"))
    return (
        f"List the {db.phrase(r, 'name')} of {db.noun(r, True)} whose {db.phrase(r, 'cat')} is {v}.",
        f"SELECT {db.col(r, 'name')} FROM {db.table(r)} WHERE {db.col(r, 'cat')} = {_lit(v)}",
    )


def _compare(db, rng, op, word):
    r = rng.choice(("child", "parent"))
    v = _threshold(db.values(r, "num"), rng)
    return (
        f"List the {db.phrase(r, 'name')} of {db.noun(r, True)} whose {db.phrase(r, 'num')} is {word} {v}.",
        f"SELECT {db.col(r, 'name')} FROM {db.table(r)} WHERE {db.col(r, 'num')} {op} {v}",
    )


def t_filter_gt(db, rng):
    return _compare(db, rng, ">", "greater than")


def t_filter_lt(db, rng):
    return _compare(db, rng, "<", "less than")


def t_filter_like(db, rng):
    r = _entity(rng)
    name = rng.choice(db.values(r, "name"))
    if rng.random() < 0.5:
        p = name[: rng.randint(1, 3)]
        return (
            f"Which {db.noun(r, True)} have {_a(db.phrase(r, 'name'))} starting with '{p}'? List their {db.phrase(r, 'name')}.",
            f"SELECT {db.col(r, 'name')} FROM {db.table(r)} WHERE {db.col(r, 'name')} LIKE '{p}%'",
        )
    p = rng.choice(name.split())
    return (
        f"Which {db.noun(r, True)} have {_a(db.phrase(r, 'name'))} containing '{p}'? List their {db.phrase(r, 'name')}.",
        f"SELECT {db.col(r, 'name')} FROM {db.table(r)} WHERE {db.col(r, 'name')} LIKE '%{p}%'",
    )


def t_filter_between(db, rng):
    lo = _threshold(db.values("child", "val"), rng, 0.0, 0.5)
    hi = _threshold(db.values("child", "val"), rng, 0.5, 1.0)
    return (
        f"List the {db.phrase('child', 'name')} and {db.phrase('child', 'val')} of {db.noun('child', True)} "
        f"whose {db.phrase('child', 'val')} is between {lo} and {hi}.",
        f"SELECT {db.col('child', 'name')}, {db.col('child', 'val')} FROM {db.table('child')} "
        f"WHERE {db.col('child', 'val')} BETWEEN {lo} AND {hi}",
    )


def t_filter_and(db, rng):
    row = rng.choice(db.rows["child"])
    v, x = row["cat"], row["num"] - rng.randint(1, 5)
    return (
        f"List the {db.phrase('child', 'name')} of {db.noun('child', True)} whose {db.phrase('child', 'cat')} is {v} "
        f"and whose {db.phrase('child', 'num')} is greater than {x}.",
        f"SELECT {db.col('child', 'name')} FROM {db.table('child')} WHERE {db.col('child', 'cat')} = {_lit(v)} "
        f"AND {db.col('child', 'num')} > {x}",
    )


def t_count(db, rng):
    r = rng.choice(("child", "other"))
    v = rng.choice(db.values(r, "cat"))
    return (
        f"How many {db.noun(r, True)} have {db.phrase(r, 'cat')} {v}?",
        f"SELECT COUNT(*) FROM {db.table(r)} WHERE {db.col(r, 'cat')} = {_lit(v)}",
    )


def t_aggregate(db, rng):
    word, fn = rng.choice(_AGGS)
    return (
        f"What is the {word} {db.phrase('child', 'val')} of all {db.noun('child', True)}?",
        f"SELECT {fn}({db.col('child', 'val')}) FROM {db.table('child')}",
    )


def t_distinct(db, rng):
    r = rng.choice(("child", "other", "parent"))
    return (
        f"List the different {db.phrase(r, 'cat')} values of {db.noun(r, True)}, without duplicates.",
        f"SELECT DISTINCT {db.col(r, 'cat')} FROM {db.table(r)}",
    )


def t_order_by(db, rng):
    desc = rng.random() < 0.5
    return (
        f"List the {db.phrase('child', 'name')} of all {db.noun('child', True)} ordered by "
        f"{db.phrase('child', 'val')} {'from highest to lowest' if desc else 'from lowest to highest'}.",
        f"SELECT {db.col('child', 'name')} FROM {db.table('child')} ORDER BY {db.col('child', 'val')}"
        f"{' DESC' if desc else ' ASC'}",
    )


def t_order_limit(db, rng):
    r = rng.choice(("child", "parent"))
    k, desc = rng.randint(1, 3), rng.random() < 0.5
    word = "highest" if desc else "lowest"
    q = (
        f"Which {db.noun(r)} has the {word} {db.phrase(r, 'num')}? Give its {db.phrase(r, 'name')}."
        if k == 1
        else f"What are the {db.phrase(r, 'name')} of the {k} {db.noun(r, True)} with the {word} {db.phrase(r, 'num')}?"
    )
    return q, (
        f"SELECT {db.col(r, 'name')} FROM {db.table(r)} ORDER BY {db.col(r, 'num')} "
        f"{'DESC' if desc else 'ASC'} LIMIT {k}"
    )


def _join_cp(db):
    return (
        f"FROM {db.table('child')} AS T1 JOIN {db.table('parent')} AS T2 "
        f"ON T1.{db.col('child', 'fk_parent')} = T2.{db.col('parent', 'id')}"
    )


def t_join(db, rng):
    return (
        f"List the {db.phrase('child', 'name')} of every {db.noun('child')} together with the "
        f"{db.phrase('parent', 'name')} of its {db.noun('parent')}.",
        f"SELECT T1.{db.col('child', 'name')}, T2.{db.col('parent', 'name')} {_join_cp(db)}",
    )


def t_join_filter(db, rng):
    v = rng.choice(db.values("parent", "cat"))
    return (
        f"List the {db.phrase('child', 'name')} of {db.noun('child', True)} whose {db.noun('parent')} has "
        f"{db.phrase('parent', 'cat')} {v}.",
        f"SELECT T1.{db.col('child', 'name')} {_join_cp(db)} WHERE T2.{db.col('parent', 'cat')} = {_lit(v)}",
    )


def t_join2(db, rng):
    link = rng.choice(db.rows["link"])
    v = db.rows["child"][link["fk_child"] - 1]["name"]
    return (
        f"List the different {db.phrase('other', 'name')} of {db.noun('other', True)} that have "
        f"{_a(db.noun('link'))} with the {db.noun('child')} {v}.",
        f"SELECT DISTINCT T3.{db.col('other', 'name')} FROM {db.table('child')} AS T1 JOIN {db.table('link')} AS T2 "
        f"ON T1.{db.col('child', 'id')} = T2.{db.col('link', 'fk_child')} JOIN {db.table('other')} AS T3 "
        f"ON T2.{db.col('link', 'fk_other')} = T3.{db.col('other', 'id')} WHERE T1.{db.col('child', 'name')} = {_lit(v)}",
    )


def t_group_count(db, rng):
    r = rng.choice(("child", "other"))
    return (
        f"How many {db.noun(r, True)} are there for each {db.phrase(r, 'cat')}?",
        f"SELECT {db.col(r, 'cat')}, COUNT(*) FROM {db.table(r)} GROUP BY {db.col(r, 'cat')}",
    )


def t_group_join(db, rng):
    return (
        f"For each {db.noun('parent')}, give its {db.phrase('parent', 'name')} and the number of "
        f"{db.noun('child', True)} it has.",
        f"SELECT T2.{db.col('parent', 'name')}, COUNT(*) {_join_cp(db)} GROUP BY T2.{db.col('parent', 'id')}",
    )


def t_group_agg(db, rng):
    word, fn = rng.choice(_AGGS)
    return (
        f"What is the {word} {db.phrase('child', 'val')} of {db.noun('child', True)} for each "
        f"{db.phrase('child', 'cat')}?",
        f"SELECT {db.col('child', 'cat')}, {fn}({db.col('child', 'val')}) FROM {db.table('child')} "
        f"GROUP BY {db.col('child', 'cat')}",
    )


def t_having(db, rng):
    counts = sorted({db.values("child", "cat").count(v) for v in db.values("child", "cat")})
    k = counts[rng.randrange(len(counts))] - 1
    return (
        f"Which {db.phrase('child', 'cat')} values are shared by more than {k} {db.noun('child', True)}?",
        f"SELECT {db.col('child', 'cat')} FROM {db.table('child')} GROUP BY {db.col('child', 'cat')} "
        f"HAVING COUNT(*) > {k}",
    )


def t_having_join(db, rng):
    k = max(1, _threshold([db.values("child", "fk_parent").count(p["id"]) for p in db.rows["parent"]], rng))
    return (
        f"List the {db.phrase('parent', 'name')} of {db.noun('parent', True)} that have at least {k} "
        f"{db.noun('child', True)}.",
        f"SELECT T2.{db.col('parent', 'name')} {_join_cp(db)} GROUP BY T2.{db.col('parent', 'id')} "
        f"HAVING COUNT(*) >= {k}",
    )


def t_nested_in(db, rng):
    v = _threshold(db.values("link", "qty"), rng)
    return (
        f"List the {db.phrase('child', 'name')} of {db.noun('child', True)} that have {_a(db.noun('link'))} "
        f"with {db.phrase('link', 'qty')} greater than {v}.",
        f"SELECT {db.col('child', 'name')} FROM {db.table('child')} WHERE {db.col('child', 'id')} IN "
        f"(SELECT {db.col('link', 'fk_child')} FROM {db.table('link')} WHERE {db.col('link', 'qty')} > {v})",
    )


def t_nested_not_in(db, rng):
    r = rng.choice(("child", "other"))
    return (
        f"List the {db.phrase(r, 'name')} of {db.noun(r, True)} that have no {db.noun('link', True)}.",
        f"SELECT {db.col(r, 'name')} FROM {db.table(r)} WHERE {db.col(r, 'id')} NOT IN "
        f"(SELECT {db.col('link', 'fk_' + r)} FROM {db.table('link')})",
    )


def t_nested_scalar(db, rng):
    above = rng.random() < 0.5
    return (
        f"List the {db.phrase('child', 'name')} of {db.noun('child', True)} whose {db.phrase('child', 'val')} is "
        f"{'above' if above else 'below'} the average {db.phrase('child', 'val')}.",
        f"SELECT {db.col('child', 'name')} FROM {db.table('child')} WHERE {db.col('child', 'val')} "
        f"{'>' if above else '<'} (SELECT AVG({db.col('child', 'val')}) FROM {db.table('child')})",
    )


def t_union(db, rng):
    v = rng.choice(db.values("child", "cat"))
    x = _threshold(db.values("child", "num"), rng, 0.6, 0.9)
    c = functools.partial(db.col, "child")
    return (
        f"List the {db.phrase('child', 'name')} of {db.noun('child', True)} whose {db.phrase('child', 'cat')} is {v} "
        f"or whose {db.phrase('child', 'num')} is greater than {x}.",
        f"SELECT {c('name')} FROM {db.table('child')} WHERE {c('cat')} = {_lit(v)} UNION "
        f"SELECT {c('name')} FROM {db.table('child')} WHERE {c('num')} > {x}",
    )


def t_intersect(db, rng):
    a = _threshold(db.values("child", "num"), rng, 0.5, 0.8)
    b = _threshold(db.values("child", "num"), rng, 0.2, 0.5)
    c = functools.partial(db.col, "child")
    return (
        f"Which {db.phrase('child', 'cat')} values have both {_a(db.noun('child'))} with {db.phrase('child', 'num')} "
        f"greater than {a} and {_a(db.noun('child'))} with {db.phrase('child', 'num')} less than {b}?",
        f"SELECT {c('cat')} FROM {db.table('child')} WHERE {c('num')} > {a} INTERSECT "
        f"SELECT {c('cat')} FROM {db.table('child')} WHERE {c('num')} < {b}",
    )


def t_except(db, rng):
    return (
        f"List the {db.phrase('child', 'name')} of {db.noun('child', True)} that never had {_a(db.noun('link'))}.",
        f"SELECT {db.col('child', 'name')} FROM {db.table('child')} EXCEPT SELECT T1.{db.col('child', 'name')} "
        f"FROM {db.table('child')} AS T1 JOIN {db.table('link')} AS T2 "
        f"ON T1.{db.col('child', 'id')} = T2.{db.col('link', 'fk_child')}",
    )


def t_date(db, rng):
    year = rng.choice(db.values("link", "date"))[:4]
    return (
        f"How many {db.noun('link', True)} took place in {year}?",
        f"SELECT COUNT(*) FROM {db.table('link')} WHERE strftime('%Y', {db.col('link', 'date')}) = '{year}'",
    )


TEMPLATES = (
    ("select", "simple", t_select),
    ("filter_eq", "simple", t_filter_eq),
    ("filter_gt", "simple", t_filter_gt),
    ("filter_lt", "simple", t_filter_lt),
    ("filter_like", "simple", t_filter_like),
    ("filter_between", "simple", t_filter_between),
    ("count", "simple", t_count),
    ("aggregate", "simple", t_aggregate),
    ("distinct", "simple", t_distinct),
    ("order_by", "simple", t_order_by),
    ("filter_and", "moderate", t_filter_and),
    ("order_limit", "moderate", t_order_limit),
    ("join", "moderate", t_join),
    ("join_filter", "moderate", t_join_filter),
    ("group_count", "moderate", t_group_count),
    ("group_join", "moderate", t_group_join),
    ("group_agg", "moderate", t_group_agg),
    ("having", "moderate", t_having),
    ("date_filter", "moderate", t_date),
    ("join2", "challenging", t_join2),
    ("having_join", "challenging", t_having_join),
    ("nested_in", "challenging", t_nested_in),
    ("nested_not_in", "challenging", t_nested_not_in),
    ("nested_scalar", "challenging", t_nested_scalar),
    ("union", "challenging", t_union),
    ("intersect", "challenging", t_intersect),
    ("except", "challenging", t_except),
)
KINDS = tuple(k for k, _, _ in TEMPLATES)
