"""Small Spider question files for stage tests: a few training questions of chosen databases, from the real data."""

import json
from pathlib import Path

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
SPIDER = DATA / "spider"
TRAIN = DATA / "spider_syn" / "train_spider.json"


def small_train_file(folder: Path, per_db: dict[str, int]) -> Path:
    """``folder/train.json``: the first ``per_db[db]`` questions of each database of Spider train (original
    ``SpiderQuestion`` text), in file order."""
    rows, taken = [], dict.fromkeys(per_db, 0)
    for row in json.loads(TRAIN.read_text()):
        db = row["db_id"]
        if db in per_db and taken[db] < per_db[db]:
            rows.append(row)
            taken[db] += 1
    path = folder / "train.json"
    path.write_text(json.dumps(rows))
    return path
