"""TFDS builders (optional extra `.[tfds]`): Spider built from the real ../shared/data/spider folder and a small
hand-made BIRD layout, read back through `tfds.data_source` and fed to the Grain prompt pipeline."""

import csv
import importlib
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow_datasets")

from rewardsql_jax.data import load_bird, load_spider, m_schema, read_bird_descriptions, reward_sql_prompt
from rewardsql_jax.data.grain_pipelines import PipelineConfig, prompt_dataset
from rewardsql_jax.data.tfds_builders import (
    build,
    data_source,
    decode_record,
    record_dataset,
    tfds_prompt_dataset,
    to_example,
)

SPIDER = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "spider"
real = pytest.mark.skipif(not SPIDER.is_dir(), reason=f"real Spider data not found at {SPIDER}")


class _ByteTokenizer:
    """Stands in for an HF tokenizer: one id per UTF-8 byte, shifted by one so 0 stays the pad id."""

    def encode(self, text, add_special_tokens=True):
        return [b + 1 for b in text.encode("utf-8")]


def _prompt_of(ex, **kwargs):
    return reward_sql_prompt(m_schema(ex.db_path, db_id=ex.db_id, **kwargs), ex.question, ex.evidence)


@pytest.fixture(scope="module")
def spider_dev(tmp_path_factory):
    return data_source("rewardsql_spider", split="dev", manual_dir=SPIDER, data_dir=tmp_path_factory.mktemp("tfds"))


@real
def test_spider_dev_records_are_the_loader_examples_in_file_order(spider_dev):
    bench = load_spider(SPIDER)
    assert len(spider_dev) == len(bench) == 972  # 1034 dev questions less the 62 on the missing wta_1
    assert [to_example(spider_dev[i]) for i in range(len(spider_dev))] == list(bench.examples)
    first = decode_record(spider_dev[0])
    db = SPIDER / "database" / "concert_singer" / "concert_singer.sqlite"
    assert {
        k: first[k] for k in ("question_id", "db_id", "question", "evidence", "gold_sql", "difficulty", "db_path")
    } == {
        "question_id": 0,
        "db_id": "concert_singer",
        "question": "How many singers do we have?",
        "evidence": "",
        "gold_sql": "SELECT count(*) FROM singer",
        "difficulty": "easy",
        "db_path": str(db),
    }
    assert first["schema"] == m_schema(db, db_id="concert_singer")
    assert first["schema"].startswith("【DB_ID】 concert_singer\n# Table: stadium\n[\n(Stadium_ID:INT, Primary Key")
    assert first["prompt"] == reward_sql_prompt(first["schema"], "How many singers do we have?")
    last = decode_record(spider_dev[len(spider_dev) - 1])
    assert (last["question_id"], last["db_id"]) == (1033, "real_estate_properties")
    assert last["prompt"] == _prompt_of(bench.examples[-1])


@real
def test_grain_pipelines_over_the_source_yield_the_loader_records(spider_dev):
    bench = load_spider(SPIDER)
    ds = record_dataset(spider_dev)
    assert len(ds) == len(bench)
    for i in (0, 100, len(ds) - 1):
        assert ds[i] == decode_record(spider_dev[i]) and to_example(ds[i]) == bench.examples[i]

    tok, cfg = (
        _ByteTokenizer(),
        PipelineConfig(batch_size=8, seed=3, buckets=(4096, 8192), shard_index=0, shard_count=1),
    )
    prompts = [_prompt_of(ex) for ex in bench.examples]
    got = tfds_prompt_dataset(spider_dev, tok, cfg)
    want = prompt_dataset([{"prompt_ids": tok.encode(p)} for p in prompts], cfg)
    assert len(got) == len(want) == len(bench) // 8
    for j in range(len(got)):
        a, b = got[j], want[j]
        assert np.array_equal(a.index, b.index) and np.array_equal(a.input_ids, b.input_ids)
        assert np.array_equal(a.attention_mask, b.attention_mask)
    batch = got[0]
    for row, i in zip(batch.input_ids, batch.index):  # left-padded rows decode back to the loader's prompt
        assert bytes(int(t) - 1 for t in row[row > 0]).decode("utf-8") == prompts[i]


def _bird_split(folder: Path, split: str, rows: list[dict]) -> None:
    db_dir = folder / f"{split}_databases" / "shop"
    (db_dir / "database_description").mkdir(parents=True)
    conn = sqlite3.connect(db_dir / "shop.sqlite")
    conn.executescript(
        "CREATE TABLE item (id INTEGER PRIMARY KEY, price REAL);INSERT INTO item VALUES (1, 3.5), (2, 9.0);"
    )
    conn.commit()
    conn.close()
    with open(db_dir / "database_description" / "item.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["original_column_name", "column_name", "column_description", "data_format", "value_description"])
        w.writerow(["price", "price", "price of the item", "real", "in dollars"])
    (folder / f"{split}.json").write_text(json.dumps(rows))


@pytest.fixture(scope="module")
def bird_dir(tmp_path_factory):
    """dev.json + dev_databases/ at the top, train.json + train_databases/ under train/ (both layouts)."""
    root = tmp_path_factory.mktemp("bird_manual")
    _bird_split(
        root,
        "dev",
        [
            {
                "question_id": 7,
                "db_id": "shop",
                "question": "Cheapest item?",
                "evidence": "cheapest refers to MIN(price)",
                "SQL": "SELECT id FROM item ORDER BY price LIMIT 1",
                "difficulty": "simple",
            },
            {
                "question_id": 8,
                "db_id": "gone",
                "question": "Q?",
                "evidence": "",
                "SQL": "SELECT 1",
                "difficulty": "simple",
            },
            {
                "question_id": 9,
                "db_id": "shop",
                "question": "How many items?",
                "evidence": "",
                "SQL": "SELECT count(*) FROM item",
                "difficulty": "moderate",
            },
        ],
    )
    (root / "train").mkdir()
    _bird_split(
        root / "train",
        "train",
        [{"db_id": "shop", "question": "Most expensive item?", "evidence": "", "SQL": "SELECT max(price) FROM item"}],
    )
    return root


def test_bird_splits_fields_and_descriptions_config(bird_dir, tmp_path):
    builder = build("rewardsql_bird", manual_dir=bird_dir, data_dir=tmp_path)
    assert {s: i.num_examples for s, i in builder.info.splits.items()} == {"dev": 2, "train": 1}
    dev = data_source("rewardsql_bird", split="dev", manual_dir=bird_dir, data_dir=tmp_path)
    bench = load_bird(bird_dir)
    assert len(dev) == len(bench) == 2  # question 8's database is missing: skipped, as by the loader
    assert [to_example(dev[i]) for i in range(2)] == list(bench.examples)
    db = bird_dir / "dev_databases" / "shop" / "shop.sqlite"
    rec = decode_record(dev[0])
    assert {k: v for k, v in rec.items() if k not in ("schema", "prompt")} == {
        "question_id": 7,
        "db_id": "shop",
        "question": "Cheapest item?",
        "evidence": "cheapest refers to MIN(price)",
        "gold_sql": "SELECT id FROM item ORDER BY price LIMIT 1",
        "difficulty": "simple",
        "db_path": str(db),
    }
    assert rec["schema"] == m_schema(db, db_id="shop") and "price of the item" not in rec["schema"]
    assert rec["prompt"] == reward_sql_prompt(rec["schema"], "Cheapest item?", "cheapest refers to MIN(price)")
    assert "【Question】\nCheapest item? cheapest refers to MIN(price)\n" in rec["prompt"]
    assert (decode_record(dev[1])["question_id"], decode_record(dev[1])["difficulty"]) == (9, "moderate")

    train = to_example(data_source("rewardsql_bird", split="train", manual_dir=bird_dir, data_dir=tmp_path)[0])
    assert train == load_bird(bird_dir / "train", split="train").examples[0]
    assert (train.question_id, train.difficulty) == (0, "unknown")

    described = decode_record(
        data_source("rewardsql_bird", split="dev", manual_dir=bird_dir, data_dir=tmp_path, config="descriptions")[0]
    )
    assert described["schema"] == m_schema(db, db_id="shop", descriptions=read_bird_descriptions(db.parent))
    assert "(price:REAL, price of the item, Examples: [3.5, 9.0])" in described["schema"]
    assert (tmp_path / "rewardsql_bird" / "descriptions").is_dir() and (
        tmp_path / "rewardsql_bird" / "default"
    ).is_dir()


def test_home_relative_dirs_are_expanded(bird_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(bird_dir.parent))
    monkeypatch.chdir(tmp_path)
    src = data_source("rewardsql_bird", split="dev", manual_dir=f"~/{bird_dir.name}", data_dir="~/tfds_home")
    assert to_example(src[0]).db_path == str(bird_dir / "dev_databases" / "shop" / "shop.sqlite")
    assert (bird_dir.parent / "tfds_home" / "rewardsql_bird").is_dir() and not (tmp_path / "~").exists()


def test_build_errors_name_the_layout(tmp_path):
    with pytest.raises(FileNotFoundError, match="manual_dir .* is not a folder"):
        build("rewardsql_spider", manual_dir=tmp_path / "nowhere", data_dir=tmp_path / "out")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "README").write_text("not a dataset")
    with pytest.raises(FileNotFoundError, match="no question file under .*train_spider.json"):
        build("rewardsql_spider", manual_dir=empty, data_dir=tmp_path / "out")
    bird = tmp_path / "bird_no_db"
    (bird / "dev_databases").mkdir(parents=True)
    (bird / "dev.json").write_text(json.dumps([{"db_id": "gone", "question": "Q?", "SQL": "SELECT 1"}]))
    with pytest.raises(FileNotFoundError, match="no question has its database under the manual dir"):
        build("rewardsql_bird", manual_dir=bird, data_dir=tmp_path / "out")


def test_core_import_stays_free_of_tfds_and_missing_extra_says_how_to_install(monkeypatch):
    code = (
        "import sys, rewardsql_jax, rewardsql_jax.data, rewardsql_jax.data.grain_pipelines; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'tensorflow_datasets'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    monkeypatch.delitem(sys.modules, "rewardsql_jax.data.tfds_builders")
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)  # what `import` sees when the extra is absent
    with pytest.raises(ImportError, match=r"pip install -e '\.\[tfds\]'"):
        importlib.import_module("rewardsql_jax.data.tfds_builders")
