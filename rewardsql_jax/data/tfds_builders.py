"""TensorFlow Datasets builders for Spider and BIRD, built from a manually downloaded folder.

Optional extra: `pip install -e '.[tfds]'` (tensorflow-datasets only; TensorFlow is not needed, the
datasets are written as ArrayRecord and read back with `tfds.data_source`). `import rewardsql_jax` never
imports this module.

    rewardsql_spider   manual_dir = unpacked Spider zip: dev.json, train_spider.json, train_others.json,
                       test.json (splits dev / train / train_others / test, whichever files are there),
                       tables.json, database/<db>/<db>.sqlite (test_database/ for test.json)
    rewardsql_bird     manual_dir holds <split>.json and <split>_databases/<db>/<db>.sqlite for split train
                       and/or dev, either directly or in a <split>/ sub-folder

Questions are read with the library's loaders (`load_spider`, `load_bird`, defaults: questions whose
database is missing are skipped), in file order (shuffling is disabled: record i of a split is
example i of the loader). Each record carries the Example fields plus `schema` (M-Schema text of
its database) and `prompt` (the raw Reward-SQL prompt), so a training pipeline needs nothing else;
`db_path` is the absolute path of the SQLite file under manual_dir at build time. The builder
config picks the M-Schema rendering; the defaults match the cold-start stage (3 example values,
no column descriptions); `rewardsql_bird/descriptions` adds BIRD's database_description texts.

    python -m rewardsql_jax.data.tfds_builders rewardsql_spider --manual_dir ../shared/data/spider --data_dir tfds
    source = data_source("rewardsql_spider", split="dev", manual_dir="../shared/data/spider", data_dir="tfds")
    examples = [to_example(source[i]) for i in range(len(source))]
    batches = tfds_prompt_dataset(source, tokenizer, PipelineConfig(batch_size=8))
"""

from __future__ import annotations

import abc
import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path

try:
    import tensorflow_datasets as tfds
except ImportError as err:  # the core install stays light; this module is the only user
    raise ImportError(
        "rewardsql_jax.data.tfds_builders needs tensorflow-datasets: pip install -e '.[tfds]' "
        "(TensorFlow itself is not required)"
    ) from err
import grain
import numpy as np

from rewardsql_jax.data.bird import load_bird, read_bird_descriptions
from rewardsql_jax.data.examples import Benchmark, Example
from rewardsql_jax.data.grain_pipelines import PipelineConfig, prompt_dataset
from rewardsql_jax.data.prompts import reward_sql_prompt
from rewardsql_jax.data.schema import MSchemaOptions, m_schema
from rewardsql_jax.data.spider import load_spider
from rewardsql_jax.data.tokenizer import encode_prompts

log = logging.getLogger(__name__)

EXAMPLE_FIELDS = tuple(f.name for f in dataclasses.fields(Example))
TEXT_FIELDS = tuple(name for name in EXAMPLE_FIELDS if name != "question_id") + ("schema", "prompt")
SPIDER_SPLITS = {
    "train": ("train_spider.json", "database"),
    "train_others": ("train_others.json", "database"),
    "dev": ("dev.json", "database"),
    "test": ("test.json", "test_database"),
}
BIRD_SPLITS = ("train", "dev")


@dataclasses.dataclass
class SchemaConfig(tfds.core.BuilderConfig):
    """How the M-Schema inside `schema` / `prompt` is rendered.

    example_num: example values per column (MSchemaOptions.example_num; the cold-start default is 3).
    descriptions: BIRD only, add each column's description from database_description/*.csv.
    """

    example_num: int = 3
    descriptions: bool = False


def _features():
    return tfds.features.FeaturesDict({"question_id": np.int64, **{k: tfds.features.Text() for k in TEXT_FIELDS}})


def _records(benchmark: Benchmark, config: SchemaConfig):
    """(key, record) per example, in the loader's order; schema text computed once per database."""
    if not benchmark.examples:
        raise FileNotFoundError(
            f"{benchmark.summary()}: no question has its database under the manual dir, so there is nothing to build"
        )
    if benchmark.missing_dbs:
        log.warning("%s", benchmark.summary())
    options, schemas = MSchemaOptions(example_num=config.example_num), {}
    for i, ex in enumerate(benchmark.examples):
        if ex.db_path not in schemas:
            descriptions = read_bird_descriptions(Path(ex.db_path).parent) if config.descriptions else None
            schemas[ex.db_path] = m_schema(ex.db_path, db_id=ex.db_id, descriptions=descriptions, options=options)
        schema = schemas[ex.db_path]
        yield (
            i,
            {**dataclasses.asdict(ex), "schema": schema, "prompt": reward_sql_prompt(schema, ex.question, ex.evidence)},
        )


class _TextToSqlBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):  # type: ignore[call-arg]  # tfds is untyped (an Any base)
    """Shared `_info` / `_generate_examples`; subclasses only choose splits and loaders."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "Example fields + M-Schema + Reward-SQL prompt, file order kept."}
    BUILDER_CONFIGS = [SchemaConfig(name="default")]

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self, description=self.__doc__, features=_features(), disable_shuffling=True
        )

    def _generate_examples(self, benchmark: Benchmark):
        yield from _records(benchmark, self.builder_config)

    @abc.abstractmethod
    def _benchmarks(self, manual_dir: Path) -> dict[str, Benchmark]:
        """{split name: Benchmark} of the question files present under ``manual_dir`` (each builder's loader)."""

    def _split_generators(self, dl_manager):
        manual_dir = Path(dl_manager.manual_dir)
        benchmarks = self._benchmarks(manual_dir)
        if not benchmarks:
            raise FileNotFoundError(f"no question file under {manual_dir}. {self.MANUAL_DOWNLOAD_INSTRUCTIONS}")
        return {split: self._generate_examples(b) for split, b in benchmarks.items()}


class RewardsqlSpider(_TextToSqlBuilder):
    """Spider 1.0 questions with gold SQL, computed hardness, SQLite path, M-Schema and Reward-SQL prompt."""

    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        "Unpack the official Spider zip and pass its folder as manual_dir: dev.json "
        "(and/or train_spider.json, train_others.json, test.json), tables.json, "
        "database/<db_id>/<db_id>.sqlite (test_database/ for test.json)."
    )

    def _benchmarks(self, manual_dir: Path) -> dict[str, Benchmark]:
        return {
            split: load_spider(manual_dir, questions=questions, db_dir=db_dir)
            for split, (questions, db_dir) in SPIDER_SPLITS.items()
            if (manual_dir / questions).is_file()
        }


class RewardsqlBird(_TextToSqlBuilder):
    """BIRD questions with evidence, gold SQL, difficulty, SQLite path, M-Schema and Reward-SQL prompt."""

    BUILDER_CONFIGS = [SchemaConfig(name="default"), SchemaConfig(name="descriptions", descriptions=True)]
    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        "Unpack the official BIRD train and/or dev zips so that manual_dir holds "
        "<split>.json and <split>_databases/<db_id>/<db_id>.sqlite, directly or "
        "under a <split>/ sub-folder (split = train, dev)."
    )

    def _benchmarks(self, manual_dir: Path) -> dict[str, Benchmark]:
        out = {}
        for split in BIRD_SPLITS:
            root = next((r for r in (manual_dir, manual_dir / split) if (r / f"{split}.json").is_file()), None)
            if root is not None:
                out[split] = load_bird(root, split=split)
        return out


def _builder_kwargs(config: str | SchemaConfig | None) -> dict:
    return {"file_format": "array_record", **({} if config is None else {"config": config})}


def _dir(path: str | Path | None) -> str | None:
    """`~` expanded (TFDS would write into a folder literally named "~")."""
    return None if path is None else str(Path(path).expanduser())


def _prepare_kwargs(manual_dir: str | Path) -> dict:
    manual_dir = str(Path(manual_dir).expanduser())  # as _dir: TFDS would write into a folder named "~"
    if not Path(manual_dir).is_dir():
        raise FileNotFoundError(f"manual_dir {manual_dir} is not a folder (unpacked Spider or BIRD files go there)")
    return {"download_config": tfds.download.DownloadConfig(manual_dir=manual_dir, try_download_gcs=False)}


def build(
    name: str, *, manual_dir: str | Path, data_dir: str | Path | None = None, config: str | SchemaConfig | None = None
) -> tfds.core.DatasetBuilder:
    """Build every split of `name` ("rewardsql_spider" / "rewardsql_bird") found in `manual_dir` into
    `data_dir` as ArrayRecord (a no-op when already built) and return the builder.

    `config`: a config name ("default"; "descriptions" for BIRD) or a SchemaConfig. `data_dir=None`
    is TFDS's default (~/tensorflow_datasets). Nothing is downloaded.
    """
    builder = tfds.builder(name, data_dir=_dir(data_dir), **_builder_kwargs(config))
    builder.download_and_prepare(**_prepare_kwargs(manual_dir))
    return builder


def data_source(
    name: str,
    *,
    split: str,
    manual_dir: str | Path,
    data_dir: str | Path | None = None,
    config: str | SchemaConfig | None = None,
):
    """`tfds.data_source` of `split` (built first if needed, see `build`): a random-access sequence
    (len, [i]) of raw records, text fields as bytes (`decode_record` / `to_example` convert them)."""
    return tfds.data_source(
        name,
        split=split,
        data_dir=_dir(data_dir),
        builder_kwargs=_builder_kwargs(config),
        download_and_prepare_kwargs=_prepare_kwargs(manual_dir),
    )


def decode_record(raw: dict) -> dict:
    """A raw TFDS record as Python values: text fields as str, question_id as int."""
    out = {k: (raw[k].decode("utf-8") if isinstance(raw[k], bytes) else str(raw[k])) for k in TEXT_FIELDS}
    return {"question_id": int(raw["question_id"]), **out}


def to_example(raw: dict) -> Example:
    """The loader's Example back from a (raw or decoded) record."""
    record = decode_record(raw)
    return Example(**{k: record[k] for k in EXAMPLE_FIELDS})


def record_dataset(source: Sequence) -> grain.MapDataset:
    """A grain.MapDataset over a TFDS data source whose elements are decoded records."""
    return grain.MapDataset.source(source).map(decode_record)


def prompt_records(
    source: Sequence, tokenizer, *, chat_template: bool = False, system: str | None = None
) -> list[dict]:
    """Decoded records plus `prompt_ids` (the tokenized `prompt`), ready for grain_pipelines."""
    records = [decode_record(source[i]) for i in range(len(source))]
    ids = encode_prompts(tokenizer, [r["prompt"] for r in records], chat_template=chat_template, system=system)
    return [{**r, "prompt_ids": p} for r, p in zip(records, ids)]


def tfds_prompt_dataset(source: Sequence, tokenizer, cfg: PipelineConfig, **format_kwargs) -> grain.MapDataset:
    """`grain_pipelines.prompt_dataset` over a TFDS source: PromptBatch elements whose `index` points into
    the source (record `index[j]` is `source[index[j]]`, e.g. for its gold_sql and db_path)."""
    return prompt_dataset(prompt_records(source, tokenizer, **format_kwargs), cfg)


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m rewardsql_jax.data.tfds_builders NAME --manual_dir DIR [--data_dir DIR] [--config NAME]`
    (`tfds build` needs TensorFlow; this does not)."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("name", choices=("rewardsql_spider", "rewardsql_bird"))
    parser.add_argument("--manual_dir", required=True)
    parser.add_argument("--data_dir", default=None)
    parser.add_argument("--config", default=None)
    args = parser.parse_args(argv)
    builder = build(args.name, manual_dir=args.manual_dir, data_dir=args.data_dir, config=args.config)
    for split, info in builder.info.splits.items():
        print(
            f"{builder.name}/{builder.builder_config.name} {split}: {info.num_examples} records in {builder.data_dir}"
        )


if __name__ == "__main__":
    main()
