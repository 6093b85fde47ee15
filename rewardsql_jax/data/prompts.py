"""Prompt strings: Reward-SQL's raw M-Schema prompt and a plain prompt (EXPO-SQL, other baselines).

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
REWARD_SQL_INSTRUCTION = ("Please read and understand the database schema carefully, and generate an "
                          "executable SQL based on the user's question and evidence.")


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
    return (f"{REWARD_SQL_HEADER.format(dialect=dialect)}\n\n"
            f"【Schema】\n{schema_text.strip()}\n\n"
            f"【Question】\n{question_with_evidence(question, evidence)}\n\n"
            f"【Evidence】\n{evidence.strip()}\n\n"
            f"{REWARD_SQL_INSTRUCTION}\n")


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
