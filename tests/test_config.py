"""Config loading and key=value overrides."""
import dataclasses
import json

import pytest

from rewardsql_jax.config import apply_overrides, load_config, save_config


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
    cfg = apply_overrides(Outer(), ["train.lr=3e-4", "train.steps=5", "train.flag=true", "seed=7",
                                    "train.eos=[3,4]", "train.path=/x", "train.name=grpo"])
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


def test_load_and_save(tmp_path):
    f = tmp_path / "c.py"
    f.write_text("import dataclasses\n@dataclasses.dataclass(frozen=True)\nclass C:\n    a: int = 1\nCONFIG = C()\n")
    cfg = load_config(f)
    assert cfg.a == 1
    save_config(cfg, tmp_path / "run" / "config.json")
    assert json.loads((tmp_path / "run" / "config.json").read_text()) == {"a": 1}
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_config(tmp_path / "missing.py")
