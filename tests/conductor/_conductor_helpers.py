"""Scripted action model for conductor tests (no model weights)."""

from rewardsql_jax.conductor.actions.env import Completion, Env


def scripted_env(answers):
    """An Env whose action model answers by task line: {"generate": sql, "refine": sql, "steps": sql}.

    A value that is a list is consumed in order (last one repeats)."""
    state = {k: list(v) if isinstance(v, list) else [v] for k, v in answers.items()}

    def complete(prompt):
        task = prompt.split("\n", 1)[0].split(": ", 1)[1]
        if "values: singer.country = 'Brazil'" in prompt and "generate_with_values" in state:
            task = "generate_with_values"
        seq = state[task]
        sql = seq.pop(0) if len(seq) > 1 else seq[0]
        return Completion(sql, len(prompt.split()), len(sql.split()))

    return Env(complete=complete)
