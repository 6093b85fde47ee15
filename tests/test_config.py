"""Config loading and key=value overrides."""

import dataclasses
import json
import re
from pathlib import Path

import pytest

from rewardsql_jax.config import apply_overrides, load_config, save_config, with_moved_fields
from rewardsql_jax.rl import get_algorithm


@dataclasses.dataclass(frozen=True)
class Inner:
    lr: float = 1e-5
    steps: int = 10
    name: str = "sft"
    flag: bool = False
    eos: tuple = (1, 2)
    path: str | None = None

    def __post_init__(self):
        if self.lr <= 0:
            raise ValueError("lr must be positive")


@dataclasses.dataclass(frozen=True)
class Outer:
    train: Inner = Inner()
    seed: int = 0


def test_overrides_parse_by_field_type():
    cfg = apply_overrides(
        Outer(),
        [
            "train.lr=3e-4",
            "train.steps=5",
            "train.flag=true",
            "seed=7",
            "train.eos=[3,4]",
            "train.path=/x",
            "train.name=grpo",
        ],
    )
    assert cfg.train == Inner(lr=3e-4, steps=5, name="grpo", flag=True, eos=(3, 4), path="/x")
    assert cfg.seed == 7


def test_override_errors_are_clear():
    with pytest.raises(ValueError, match="unknown field 'lrr'"):
        apply_overrides(Outer(), ["train.lrr=1"])
    with pytest.raises(ValueError, match="expected a int"):
        apply_overrides(Outer(), ["seed=abc"])
    with pytest.raises(ValueError, match="key=value"):
        apply_overrides(Outer(), ["seed"])
    with pytest.raises(ValueError, match="lr must be positive"):
        apply_overrides(Outer(), ["train.lr=-1"])
    with pytest.raises(ValueError, match="is a section"):
        apply_overrides(Outer(), ["train=3"])


@with_moved_fields
@dataclasses.dataclass(frozen=True)
class WithDict:
    opts: dict = dataclasses.field(default_factory=lambda: {"a": 1.0})
    seed: int = 0

    @classmethod
    def moved_field(cls, name):
        return "old_a moved: use opts.a" if name == "old_a" else None


def test_dict_entries_are_set_one_at_a_time_on_top_of_the_whole_dict_in_either_order():
    assert apply_overrides(WithDict(), ["opts.b=true", "opts.a=2", "opts.c=paper"]).opts == {
        "a": 2.0,
        "b": True,
        "c": "paper",
    }
    both = ['opts={"x": 1}', "opts.y=0.5"]
    assert apply_overrides(WithDict(), both).opts == apply_overrides(WithDict(), both[::-1]).opts == {"x": 1, "y": 0.5}
    with pytest.raises(ValueError, match="expected a float"):
        apply_overrides(WithDict(), ["opts.a=abc"])  # an entry that exists is parsed by its type
    with pytest.raises(ValueError, match="set one entry of 'opts'"):
        apply_overrides(WithDict(), ["opts.a.b=1"])


def test_a_moved_field_fails_with_its_message_as_override_and_as_keyword():
    with pytest.raises(ValueError, match=r"^override old_a=3: old_a moved: use opts\.a$"):
        apply_overrides(WithDict(), ["seed=1", "old_a=3"])
    with pytest.raises(ValueError, match=r"^old_a moved: use opts\.a$"):
        WithDict(old_a=3)
    with pytest.raises(ValueError, match=r"^old_a moved"):
        dataclasses.replace(WithDict(), old_a=3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'other'"):
        WithDict(other=3)  # not a moved field: Python's own error
    assert WithDict(seed=2).seed == 2


def test_load_and_save(tmp_path):
    f = tmp_path / "c.py"
    f.write_text("import dataclasses\n@dataclasses.dataclass(frozen=True)\nclass C:\n    a: int = 1\nCONFIG = C()\n")
    cfg = load_config(f)
    assert cfg.a == 1
    save_config(cfg, tmp_path / "run" / "config.json")
    assert json.loads((tmp_path / "run" / "config.json").read_text()) == {"a": 1}
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_config(tmp_path / "missing.py")


# --- the pipeline's RunConfig: validated once, after all overrides -----------------------------------------

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "configs" / "smoke.py"
SPIDER = ROOT.parent / "shared" / "data" / "spider"


@pytest.mark.parametrize("order", [0, 1])
def test_source_and_root_in_either_order(order, tmp_path):
    overrides = ["data.source=spider", f"data.root={tmp_path}"]
    cfg = apply_overrides(load_config(SMOKE), overrides if order == 0 else overrides[::-1])
    assert (cfg.data.source, cfg.data.root) == ("spider", str(tmp_path))


@pytest.mark.parametrize("order", [0, 1])
def test_rm_coef_and_released_variant_in_either_order(order):
    overrides = ["rl.algorithm_options.rm_coef=0", "rl.algorithm_options.advantage_variant=released"]
    cfg = apply_overrides(load_config(SMOKE), overrides if order == 0 else overrides[::-1])
    opts = get_algorithm("grpo").options(cfg.rl)
    assert (opts.rm_coef, opts.advantage_variant) == (0.0, "released")


def test_only_touched_sections_are_rebuilt():
    base = load_config(SMOKE)
    cfg = apply_overrides(base, ["rl.steps=3", "seed=5"])
    assert cfg.data is base.data and cfg.sft is base.sft
    assert (cfg.rl.steps, cfg.seed) == (3, 5)
    assert apply_overrides(base, []) is base


def test_bad_values_name_the_key():
    base = load_config(SMOKE)
    with pytest.raises(ValueError, match=r"override data\.source=spdr: .*choose one of"):
        apply_overrides(base, ["data.source=spdr", "data.root=/x", "rl.steps=3"])
    with pytest.raises(ValueError, match=r"override data\.source=spider: data\.root is required"):
        apply_overrides(base, ["rl.steps=3", "data.source=spider"])
    with pytest.raises(ValueError, match=r"override rl\.steps=0: .*steps must be positive"):
        apply_overrides(base, ["data.root=/x", "rl.steps=0", "rl.lr=1e-4"])
    with pytest.raises(
        ValueError, match=r"override rl\.algorithm_options\.rm_coef=-1: rl\.algorithm_options\.rm_coef must be >= 0"
    ):
        apply_overrides(base, ["rl.algorithm_options.advantage_variant=released", "rl.algorithm_options.rm_coef=-1"])
    with pytest.raises(ValueError, match=r"override mesh\.fsdp=0: mesh sizes"):
        apply_overrides(base, ["mesh.fsdp=0"])
    with pytest.raises(ValueError, match="unknown field 'stepz'"):
        apply_overrides(base, ["rl.steps=3", "rl.stepz=1"])
    with pytest.raises(ValueError, match="unknown field 'rll'"):
        apply_overrides(base, ["rll.steps=3"])
    with pytest.raises(ValueError, match="seed is not a section"):
        apply_overrides(base, ["seed=1", "seed.x=2"])
    with pytest.raises(ValueError, match="expected a int"):
        apply_overrides(base, ["data.source=spider", "rl.steps=many"])


def test_model_lora_section_from_overrides():
    base = load_config(SMOKE)
    assert base.model.lora.rank == 0  # off unless asked
    cfg = apply_overrides(base, ["model.lora.rank=16", "model.lora.targets=q,v,gate", "model.lora.dropout=0.05"])
    assert (cfg.model.lora.rank, cfg.model.lora.alpha, cfg.model.lora.dropout) == (16, 16.0, 0.05)
    assert cfg.model.lora.targets == ("q", "v", "gate")
    assert apply_overrides(base, ['model.lora.targets=("down",)']).model.lora.targets == ("down",)


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.lora.rank=-1", r"lora\.rank=-1: must be an integer >= 0"),
        (
            "model.lora.targets=q,x",
            r"lora\.targets=\('q', 'x'\) \(unknown \['x'\]\): choose distinct ones of q, k, v, o, "
            r"gate, up, down",
        ),
        (
            "model.lora.targets=q,q",
            r"lora\.targets=\('q', 'q'\) \(repeated\): choose distinct ones of q, k, v, o, gate, up, down",
        ),
        ("model.lora.dropout=1", r"lora\.dropout=1\.0: must be in \[0, 1\)"),
        ("model.lora.dropout=-0.1", r"lora\.dropout=-0\.1: must be in \[0, 1\)"),
        ("model.lora.alpha=0", r"lora\.alpha=0\.0: must be > 0"),
    ],
)
def test_bad_model_lora_values_are_refused_naming_the_field_and_the_choices(override, message):
    with pytest.raises(ValueError, match=rf"override {re.escape(override)}: {message}"):
        apply_overrides(load_config(SMOKE), [override])


def test_spider_split_defaults_resolve_to_question_files(tmp_path):
    cfg = apply_overrides(load_config(SMOKE), ["data.source=spider", f"data.root={tmp_path}"])
    assert (cfg.data.train_split, cfg.data.eval_split) == ("train_spider.json", "dev.json")
    # explicit files, and "" (no train split), are kept; other sources keep the generic names
    cfg = apply_overrides(
        load_config(SMOKE),
        [
            "data.source=spider",
            f"data.root={tmp_path}",
            "data.train_split=",
            "data.eval_split=../spider_dk/Spider-DK.json",
        ],
    )
    assert (cfg.data.train_split, cfg.data.eval_split) == ("", "../spider_dk/Spider-DK.json")
    cfg = apply_overrides(load_config(SMOKE), ["data.source=bird", f"data.root={tmp_path}"])
    assert (cfg.data.train_split, cfg.data.eval_split) == ("train", "dev")


@pytest.mark.skipif(not SPIDER.exists(), reason="../shared/data/spider not present")
def test_spider_split_defaults_match_the_shared_layout():
    """The defaults name the official Spider files: dev.json is in ../shared/data/spider; its train questions
    (train_spider.json) are in ../shared/data/spider_syn (README there), reachable as ../spider_syn/train_spider.json."""
    from rewardsql_jax.data.spider import load_spider

    cfg = apply_overrides(load_config(SMOKE), ["data.source=spider", f"data.root={SPIDER}"])
    assert (SPIDER / cfg.data.eval_split).is_file()
    assert (SPIDER.parent / "spider_syn" / cfg.data.train_split).is_file()
    bench = load_spider(SPIDER, questions=cfg.data.eval_split, limit=3)
    assert len(bench.examples) == 3


def test_ex_mode_follows_the_data_unless_given():
    """A Spider run evaluates with Spider's rule unless told otherwise; BIRD and the built-in data with BIRD's."""
    from rewardsql_jax.stages.run_config import DataConfig

    assert DataConfig(source="spider", root="x").ex_mode == "spider"
    assert DataConfig(source="bird", root="x").ex_mode == "bird"
    assert DataConfig().ex_mode == "bird"
    assert DataConfig(source="spider", root="x", ex_mode="bird").ex_mode == "bird"
