import pytest

from rewardsql_jax.conductor.actions.batching import CallBatcher


def test_calls_of_live_threads_are_served_in_one_batch_per_kind():
    batches = []

    def double(payloads):
        batches.append(("double", list(payloads)))
        return [2 * p for p in payloads]

    def neg(payloads):
        batches.append(("neg", list(payloads)))
        return [-p for p in payloads]

    def job(i, steps):
        def run(call):
            out = []
            for s in range(steps):
                out.append(call("double" if (i + s) % 2 else "neg", 10 * i + s))
            return out

        return run

    results = CallBatcher({"double": double, "neg": neg}).run([job(i, 3 if i < 3 else 1) for i in range(4)])
    assert results == [[0, 2, -2], [20, -11, 24], [-20, 42, -22], [60]]
    assert batches[0] == ("double", [10, 30]) and batches[1] == ("neg", [0, 20])  # all 4 threads in round 1
    assert sum(len(p) for _, p in batches) == 10 and len(batches) == 6  # 3 rounds x 2 kinds, not 10 calls


def test_errors_propagate_and_unknown_kinds_are_named():
    with pytest.raises(ValueError, match="no model registered for call kind 'x'"):
        CallBatcher({"a": lambda ps: ps}).run([lambda call: call("x", 1)])

    def boom(payloads):
        raise RuntimeError("model exploded")

    with pytest.raises(RuntimeError, match="model exploded"):
        CallBatcher({"a": boom}).run([lambda call: call("a", 1), lambda call: call("a", 2)])


def test_progress_bar_counts_finished_episodes_and_rounds(capsys):
    batcher = CallBatcher({"a": lambda ps: ps})
    jobs = [lambda call, i=i: [call("a", i) for _ in range(i + 1)] for i in range(3)]
    assert batcher.run(jobs, desc="episodes") == [[0], [1, 1], [2, 2, 2]]
    assert batcher.rounds == 3  # the longest job's three calls; the others join the first rounds
    err = capsys.readouterr().err
    assert "episodes" in err and "3/3" in err and "round=3" in err
