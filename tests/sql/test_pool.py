"""ExecutorPool: same results as execute(), in order; crashed/hung workers replaced; nothing lost."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from rewardsql_jax.sql import ExecResult, ExecutorPool, execute

RECURSIVE = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"


@pytest.fixture(scope="module")
def pool():
    with ExecutorPool(workers=2, hang_grace_s=1.0, _test_hooks=True) as p:
        yield p


def test_spider_dev_gold_same_as_execute_in_input_order(pool, spider_dev):
    jobs = [(db, sql) for db, sql, _ in spider_dev]
    got = pool.map(jobs, progress="spider dev")
    assert len(got) == len(jobs)
    assert got == [execute(db, sql) for db, sql in jobs]
    assert sum(r.ok for r in got) == len(jobs)  # every shipped dev gold query runs


def test_cache_hits_and_identical_results(pool, tiny_db):
    jobs = [(tiny_db, "SELECT name FROM person ORDER BY id"), (tiny_db, "SELECT count(*) FROM pet")] * 3
    before = pool.stats
    first = pool.map(jobs)
    mid = pool.stats
    assert mid.executed - before.executed == 2  # duplicates inside one call run once
    second = pool.map(jobs)
    after = pool.stats
    assert second == first
    assert after.executed == mid.executed and after.cache_hits - mid.cache_hits == len(jobs)
    assert first[0].rows == (("Ann",), ("Bob",), ("Cid",), ("Dee",), ("Eve",))


def test_cache_disabled_reexecutes(tiny_db):
    with ExecutorPool(workers=1, cache_size=0) as p:
        p.map([(tiny_db, "SELECT 1")])
        p.map([(tiny_db, "SELECT 1")])
        assert p.stats.executed == 2 and p.stats.cache_hits == 0


def test_cache_sees_a_changed_file(tmp_path, make_db):
    db = make_db("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
    with ExecutorPool(workers=1) as p:
        assert p.map([(db, "SELECT x FROM t")])[0].rows == ((1,),)
        import sqlite3

        conn = sqlite3.connect(db)
        conn.execute("INSERT INTO t VALUES (2)")
        conn.commit()
        conn.close()
        os.utime(db, ns=(time.time_ns(), time.time_ns() + 10**9))
        assert p.map([(db, "SELECT x FROM t ORDER BY x")])[0].rows == ((1,), (2,))


def test_max_rows_and_text_errors_are_part_of_the_key(pool, tiny_db):
    sql = "SELECT * FROM pet"
    assert not pool.map([(tiny_db, sql)], max_rows=2)[0].ok
    assert pool.map([(tiny_db, sql)])[0].ok


def test_bad_inputs_never_raise(pool, tiny_db, tmp_path):
    jobs = [
        (tmp_path / "nope.sqlite", "SELECT 1"),
        (tiny_db, ""),
        (tiny_db, "SELECT 1; SELECT 2"),
        (tiny_db, b"SELECT '\xff'"),
        (tiny_db, "SELECT 1" + " " * (1 << 20)),
        (tiny_db, None),
        (tiny_db, "DROP TABLE person"),
        (tiny_db, "SELECT 7"),
    ]
    got = pool.map(jobs)
    assert [r.ok for r in got] == [False] * 7 + [True]
    assert all(isinstance(r, ExecResult) and r.error for r in got[:7])
    assert got[-1].rows == ((7,),)


def test_malformed_job_is_a_clear_error(pool):
    with pytest.raises(ValueError, match="job 1 must be a"):
        pool.map([("a.sqlite", "SELECT 1"), "SELECT 1"])


def test_crashing_job_reported_and_worker_replaced(pool, tiny_db):
    pids = set(pool.worker_pids)
    crashed_before = pool.stats.crashed
    got = pool.map([(tiny_db, "SELECT 1"), (tiny_db, "--@test:crash\nSELECT 2"), (tiny_db, "SELECT 3")])
    assert got[0].rows == ((1,),) and got[2].rows == ((3,),)
    assert not got[1].ok and "worker crashed" in got[1].error
    assert pool.stats.crashed == crashed_before + 1
    assert set(pool.worker_pids) != pids and len(pool.worker_pids) == 2
    assert pool.map([(tiny_db, "SELECT 4")])[0].rows == ((4,),)


def test_hung_worker_killed_and_reported(pool, tiny_db):
    got = pool.map([(tiny_db, "--@test:hang\nSELECT 1"), (tiny_db, "SELECT 5")], timeout_s=0.5)
    assert not got[0].ok and "worker hung" in got[0].error and got[0].timed_out
    assert got[1].rows == ((5,),)
    assert pool.stats.hung >= 1


def test_hooks_are_inert_without_flag(tiny_db):
    with ExecutorPool(workers=1) as p:
        assert p.map([(tiny_db, "--@test:crash\nSELECT 2")])[0].rows == ((2,),)


def test_idle_worker_killed_with_sigkill_is_replaced(pool, tiny_db):
    victim = pool.worker_pids[0]
    os.kill(victim, signal.SIGKILL)
    time.sleep(0.2)
    got = pool.map([(tiny_db, f"SELECT {i}") for i in range(20)])
    assert [r.rows for r in got] == [((i,),) for i in range(20)]
    assert victim not in pool.worker_pids


def test_killing_workers_mid_job_never_loses_the_job(tiny_db):
    # A job whose worker is killed is retried once on a fresh worker; killed again, it is reported.
    with ExecutorPool(workers=1, cache_size=0) as p:
        out = {}
        runner = threading.Thread(target=lambda: out.setdefault("r", p.map([(tiny_db, RECURSIVE)], timeout_s=20.0)))
        runner.start()
        killed = set()
        while runner.is_alive():
            for pid in p.worker_pids:
                if pid not in killed:
                    time.sleep(0.3)  # let it pick the job up
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    killed.add(pid)
            time.sleep(0.05)
        runner.join()
        (r,) = out["r"]
        assert not r.ok and "worker crashed" in r.error
        assert len(killed) >= 2 and not killed & set(p.worker_pids)
        assert p.map([(tiny_db, "SELECT 9")])[0].rows == ((9,),)


def test_runaway_in_worker_times_out(pool, tiny_db):
    (r,) = pool.map([(tiny_db, RECURSIVE)], timeout_s=0.5)
    assert r.timed_out and "timed out" in r.error


def test_heap_limit_in_workers(tiny_db):
    sql = "SELECT length(randomblob(48000000))"
    with ExecutorPool(workers=1, heap_limit_bytes=32 * 2**20) as p:
        r = p.map([(tiny_db, sql)])[0]
        assert not r.ok and "out of memory" in r.error
        assert p.map([(tiny_db, "SELECT 1")])[0].ok  # the worker survives
    with ExecutorPool(workers=1) as p:
        assert p.map([(tiny_db, sql)])[0].rows == ((48000000,),)


def test_spawn_start_method_and_progress_bar(tiny_db, capsys):
    with ExecutorPool(workers=1, start_method="spawn") as p:
        got = p.map([(tiny_db, "SELECT 1")] * 3, progress=True)
        assert [r.rows for r in got] == [((1,),)] * 3
    assert "3/3" in capsys.readouterr().err


def test_bad_construction_and_closed_pool():
    with pytest.raises(ValueError, match="fork"):
        ExecutorPool(workers=1, start_method="fork")
    with pytest.raises(ValueError, match="workers"):
        ExecutorPool(workers=0)
    p = ExecutorPool(workers=1)
    p.close()
    p.close()
    with pytest.raises(RuntimeError, match="closed"):
        p.map([])


def test_interrupted_map_leaves_no_stale_results(tiny_db, monkeypatch):
    import rewardsql_jax.sql.pool as pool_module

    with ExecutorPool(workers=1, cache_size=0) as p:
        real_wait = pool_module.wait

        def interrupted(*args, **kwargs):
            monkeypatch.setattr(pool_module, "wait", real_wait)
            raise KeyboardInterrupt

        monkeypatch.setattr(pool_module, "wait", interrupted)
        with pytest.raises(KeyboardInterrupt):
            p.map([(tiny_db, f"SELECT {i}") for i in range(50)])
        # The busy worker was replaced, so its late answers cannot be taken for this call's jobs.
        assert [r.rows for r in p.map([(tiny_db, "SELECT 'new'")] * 3)] == [(("new",),)] * 3
