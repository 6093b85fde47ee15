"""Spider loader on the real Spider files in ../shared/data (skipped only when that folder is absent)."""

from pathlib import Path

import pytest

from rewardsql_jax.data import MissingDatabaseError, load_spider

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
SPIDER = DATA / "spider"
pytestmark = pytest.mark.skipif(not SPIDER.is_dir(), reason=f"real Spider data not found at {SPIDER}")


def test_dev_all_questions_without_db_check():
    b = load_spider(SPIDER, require_db=False)
    assert len(b) == 1034
    assert b.missing_dbs == ("wta_1",)  # the one dev DB the snapshot lacks (README)
    assert b.n_skipped == 0
    assert {e.difficulty for e in b} == {"easy", "medium", "hard", "extra"}
    first = b.examples[0]
    assert (first.question_id, first.db_id) == (0, "concert_singer")
    assert first.question == "How many singers do we have?"
    assert first.gold_sql == "SELECT count(*) FROM singer"
    assert first.evidence == ""


def test_dev_with_db_present_skips_and_reports_wta_1():
    b = load_spider(SPIDER)
    assert len(b) == 972
    assert b.n_skipped == 62 and b.missing_dbs == ("wta_1",)
    assert all(Path(e.db_path).is_file() for e in b)
    assert "wta_1" not in b.db_ids and len(b.db_ids) == 19
    assert "62 questions skipped" in b.summary()


def test_missing_db_raises_with_name_and_path():
    with pytest.raises(MissingDatabaseError, match=r"wta_1.*wta_1[/\\]wta_1\.sqlite"):
        load_spider(SPIDER, on_missing="raise")


def test_limit_and_db_filter():
    b = load_spider(SPIDER, db_ids=["pets_1"], limit=5)
    assert len(b) == 5 and b.db_ids == ("pets_1",)
    assert (
        load_spider(SPIDER, db_ids="pets_1").difficulty_counts()
        == load_spider(SPIDER, db_ids=["pets_1"]).difficulty_counts()
    )
    assert len(load_spider(SPIDER, limit=0)) == 0


def test_spider_syn_train_file_reads_original_questions():
    syn = DATA / "spider_syn" / "train_spider.json"
    if not syn.is_file():
        pytest.skip(f"Spider-Syn file not found at {syn}")
    b = load_spider(SPIDER, questions=syn, limit=3)
    assert b.examples[0].question == "How many heads of the departments are older than 56 ?"
    assert b.examples[0].gold_sql == "SELECT count(*) FROM head WHERE age  >  56"
    assert b.examples[0].difficulty == "easy"  # one WHERE: approximate hardness from the SQL text
    syn_q = load_spider(SPIDER, questions=syn, question_field="SpiderSynQuestion", limit=1)
    assert syn_q.examples[0].question == "How many leaders of the divisions are older than 56 ?"


def test_spider_dk_searches_its_own_databases_first():
    dk = DATA / "spider_dk"
    if not dk.is_dir():
        pytest.skip(f"Spider-DK not found at {dk}")
    b = load_spider(dk, questions="Spider-DK.json", db_dir=["database", SPIDER / "database"])
    assert len(b) == 535 - 62 and b.missing_dbs == ("wta_1",)
    paths = {e.db_id: e.db_path for e in b}
    assert paths["new_concert_singer"].startswith(str(dk / "database"))
    assert paths["car_1"].startswith(str(SPIDER / "database"))
    # index 76 has a gold typo sqlglot cannot parse: hardness unknown instead of a failed load
    assert b.examples[76].difficulty == "unknown"
    assert sum(e.difficulty == "unknown" for e in b) == 1


def test_clear_errors_for_missing_paths(tmp_path):
    with pytest.raises(FileNotFoundError, match="Spider data folder not found"):
        load_spider(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="Spider question file not found.*dev.json"):
        load_spider(tmp_path)
    with pytest.raises(ValueError, match="on_missing"):
        load_spider(SPIDER, on_missing="ignore")
