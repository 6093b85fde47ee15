"""Prompt strings: Reward-SQL's raw M-Schema prompt, its gold SQL -> Chain-of-CTEs rewrite prompt
(``cocte_rewrite_prompt``, cold start) and a plain prompt (EXPO-SQL, other baselines).

Reward-SQL (DESIGN.md; paper Appendix A.4 / Figure 6, built on XiYan's M-Schema template) feeds
the model a raw string, no chat template. Its layout follows XiYan's published English template
(blank line between blocks, a final newline) without XiYan's closing "The generated SQL is
protected by ```sql and ```." because Reward-SQL's policy answers with bare SQL (CoCTE steps):

    You are now a sqlite data analyst, and you are given a database schema as follows:
    <blank>
    【Schema】
    <M-Schema text from schema.m_schema>
    <blank>
    【Question】
    <question> <evidence>
    <blank>
    【Evidence】
    <evidence>
    <blank>
    Please read and understand the database schema carefully, and generate an executable SQL based on the user's question and evidence.

The question line is `question + " " + evidence` as in the Reward-SQL data (DESIGN.md); when the
evidence is empty (Spider, built-in benchmark) it is the question alone, with no trailing space.
"""

from __future__ import annotations

REWARD_SQL_HEADER = "You are now a {dialect} data analyst, and you are given a database schema as follows:"
REWARD_SQL_INSTRUCTION = (
    "Please read and understand the database schema carefully, and generate an "
    "executable SQL based on the user's question and evidence."
)


def _check(schema_text: str, question: str, evidence: str) -> None:
    if not isinstance(schema_text, str) or not schema_text.strip():
        raise ValueError("schema_text must be a non-empty string (e.g. from rewardsql_jax.data.m_schema)")
    if not isinstance(question, str) or not question.strip():
        raise ValueError("question must be a non-empty string")
    if not isinstance(evidence, str):
        raise TypeError(f"evidence must be a string ('' when there is none), got {type(evidence).__name__}")


def question_with_evidence(question: str, evidence: str) -> str:
    """Reward-SQL's question line: `question + " " + evidence`, or just the question without evidence."""
    question, evidence = question.strip(), evidence.strip()
    return f"{question} {evidence}" if evidence else question


def reward_sql_prompt(schema_text: str, question: str, evidence: str = "", *, dialect: str = "sqlite") -> str:
    """The raw Reward-SQL prompt (see the module docstring for the exact layout)."""
    _check(schema_text, question, evidence)
    return (
        f"{REWARD_SQL_HEADER.format(dialect=dialect)}\n\n"
        f"【Schema】\n{schema_text.strip()}\n\n"
        f"【Question】\n{question_with_evidence(question, evidence)}\n\n"
        f"【Evidence】\n{evidence.strip()}\n\n"
        f"{REWARD_SQL_INSTRUCTION}\n"
    )


def plain_prompt(schema_text: str, question: str, evidence: str = "") -> str:
    """A plain text-to-SQL prompt (schema, question, optional evidence, then "SQL:").

    Used for EXPO-SQL, whose paper gives no prompt template, and for small models trained from
    scratch. The evidence line is left out when there is no evidence.
    """
    _check(schema_text, question, evidence)
    lines = [f"Database schema:\n{schema_text.strip()}", "", f"Question: {question.strip()}"]
    if evidence.strip():
        lines.append(f"Evidence: {evidence.strip()}")
    lines += ["", "SQL:"]
    return "\n".join(lines) + "\n"


# One hand-written rewrite (Reward-SQL Figure 7's example #1) in the policy's output layout: one CTE per step,
# steps separated by a blank line, then the final SELECT.
COCTE_REWRITE_EXAMPLE = (
    "Please list the team names which have at least 3 all-star players.",
    "SELECT players_teams.tmid FROM players_teams INNER JOIN player_allstar ON players_teams.playerid = "
    "player_allstar.playerid GROUP BY players_teams.tmid HAVING count(DISTINCT players_teams.playerid) >= 3",
    "WITH All_Star_Players AS (\n  SELECT playerid\n  FROM player_allstar\n),\n\n"
    "All_Star_Team_Associations AS (\n  SELECT pt.tmid, pt.playerid\n  FROM players_teams AS pt\n"
    "  INNER JOIN All_Star_Players AS asp ON pt.playerid = asp.playerid\n),\n\n"
    "Teams_With_Three_All_Stars AS (\n  SELECT at.tmid\n  FROM All_Star_Team_Associations AS at\n"
    "  GROUP BY at.tmid\n  HAVING COUNT(DISTINCT at.playerid) >= 3\n)\n\n"
    "SELECT tmid FROM Teams_With_Three_All_Stars",
)
COCTE_REWRITE_ANSWER = "【Chain-of-CTEs】\n"


def cocte_rewrite_prompt(schema_text: str, question: str, gold_sql: str, evidence: str = "") -> str:
    """Prompt asking an LLM to rewrite gold SQL as a Chain-of-CTEs (Reward-SQL Sec. 4.1, Figure 7).

    Figure 7's task (rewrite the SQL with CTEs, keep the result) with its example #1, but the answer is the
    CoCTE text itself in the policy's layout (``WITH a AS (...),`` steps separated by a blank line, then
    the final SELECT) rather than JSON parts with rationales, since only the SQL becomes an SFT target.
    Ends with ``COCTE_REWRITE_ANSWER``; the model continues with the CoCTE.
    """
    _check(schema_text, question, evidence)
    if not isinstance(gold_sql, str) or not gold_sql.strip():
        raise ValueError("gold_sql must be a non-empty SQL string")
    ex_question, ex_sql, ex_cocte = COCTE_REWRITE_EXAMPLE
    return (
        "Your task is to rewrite the following SQL query with common table expressions (a Chain-of-CTEs), "
        "one reasoning step per CTE. Each CTE is one step that may read the tables and the earlier CTEs; "
        "separate the steps with a blank line and end with the final SELECT that answers the question. "
        "The rewrite must return exactly the same result as the original SQL. Answer with the SQL only.\n\n"
        f"Example:\n【Question】\n{ex_question}\n\n【SQL】\n{ex_sql}\n\n{COCTE_REWRITE_ANSWER}{ex_cocte}\n\n"
        f"Task:\n【Schema】\n{schema_text.strip()}\n\n"
        f"【Question】\n{question_with_evidence(question, evidence)}\n\n"
        f"【SQL】\n{gold_sql.strip()}\n\n{COCTE_REWRITE_ANSWER}"
    )
