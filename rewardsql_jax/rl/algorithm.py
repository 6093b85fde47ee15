"""RL algorithms as registered objects: what an algorithm needs, its loss, how it scores rollouts, its checks.

An algorithm is one module with one class registered by name (``@register_algorithm``); the RL stage, the
memory check and the planner only ask the registry, so a new algorithm — in the package or in a user's file
loaded with ``plugins=...`` — is selected with ``rl.algorithm=NAME`` and needs no edit elsewhere.

  OnlineAlgorithm   samples every step from the current policy; ``update(rollouts, prm_scores, rl)`` turns the
                    executed (and, with ``needs_prm``, PRM-scored) rollouts into advantages or token rewards
                    (an ``Update``), which ``update.train_batch`` lays out as the train batch.
  OfflineAlgorithm  scores candidates of the SFT policy once; ``select`` picks what to train on, ``batch``
                    lays a step's items out (DPO pairs, rejection-sampled sequences).

``rl.loss`` replaces an algorithm's loss by another of the same family (``losses.register(..., family=)``),
with ``rl.loss_options`` as its options; ``policy_loss(rl)`` resolves both.
"""

from __future__ import annotations

import abc
from typing import ClassVar

from rewardsql_jax import losses

from .options import option_names, typed_options

_ALGORITHMS: dict[str, RLAlgorithm] = {}


class RLAlgorithm(abc.ABC):
    """Base of every RL algorithm (abstract: registering a subclass that lacks ``update`` / ``select`` / ``batch``
    fails with Python's message naming the missing method). ``loss`` is its default loss; ``needs_prm``: the stage loads ``prm/model`` (``uses_prm(rl)``
    refines it per configuration)."""

    name: ClassVar[str]
    online: ClassVar[bool]
    needs_prm: ClassVar[bool] = False
    loss: ClassVar[str]
    options_type: ClassVar[type | None] = None  # a frozen dataclass of the algorithm's own rl.algorithm_options
    # RLConfig fields of earlier versions that are now this algorithm's options: {old rl field: option name}
    moved_settings: ClassVar[dict[str, str]] = {}

    def loss_options(self, rl) -> dict:
        """Options of the default loss ``self.loss`` taken from the ``rl`` section."""
        return {}

    def uses_prm(self, rl) -> bool:
        """Whether the reward of this ``rl`` section reads PRM step scores: the RL stage loads and runs the PRM only
        then (``needs_prm`` unless an algorithm's options turn the PRM off, e.g. grpo's ``rm_coef=0``)."""
        return self.needs_prm

    def options(self, rl):
        """``rl.algorithm_options`` as the algorithm's ``options_type`` with its defaults for the keys not given
        (``None`` for an algorithm without options); unknown keys fail listing its options."""
        try:
            return typed_options(self.options_type, rl.algorithm_options, self.name)
        except ValueError as e:
            owners = _option_owners(set(rl.algorithm_options or ()) - set(option_names(self.options_type)))
            raise ValueError(f"{e}{owners}") from None

    def validate(self, config) -> None:
        """Cross-field checks of a whole ``RunConfig`` for this algorithm; raise ValueError with the fix."""
        rl = config.rl
        self.options(rl)
        loss, _ = policy_loss(rl, self)
        want = losses.family(self.loss)
        if losses.family(loss) != want:
            raise ValueError(
                f"rl.loss={loss!r} is a {losses.family(loss)} loss but rl.algorithm={self.name!r} "
                f"trains a {want} loss; pick one of {losses.names(want)}"
            )


class OnlineAlgorithm(RLAlgorithm):
    """Samples ``rl.samples_per_prompt`` completions per question each step and updates on them."""

    online = True
    clause_rewards: ClassVar[bool] = False  # the host computes EXPO-SQL clause rewards with the execution
    group_normalised: ClassVar[bool] = True  # normalises rewards within a question's group of samples
    batch_field: ClassVar[str] = "advantages"  # the train-batch field the update fills (or "token_rewards")

    @abc.abstractmethod
    def update(self, rollouts, prm_scores, rl):
        """The ``Update`` (advantages / token values and the logged per-completion reward) of a rollout batch."""

    def validate(self, config) -> None:
        """The base checks, ``check_settings(config.rl)`` and the pipeline's micro-batch layout
        (``config.rl.check_layout(mesh.micro_batches)``, the ``rl`` section's own rules)."""
        super().validate(config)
        self.check_settings(config.rl)
        config.rl.check_layout(config.mesh.micro_batches)

    def check_settings(self, rl) -> None:
        """Checks of an online ``rl`` section (``OnlineRLConfig``) for this algorithm; raise ValueError with the fix."""
        loss = policy_loss(rl, self)[0]
        if losses.spec(loss).reads != self.batch_field:
            raise ValueError(
                f"rl.algorithm={self.name!r} fills {self.batch_field} but the {loss} loss reads "
                f"{losses.spec(loss).reads}; pick a loss that reads {self.batch_field} "
                f"(or rl.loss='' for the algorithm's own)"
            )
        if rl.temperature <= 0:
            raise ValueError(
                f"rl.temperature={rl.temperature}: RL samples rollouts, use a temperature > 0 (paper: 1.0)"
            )
        if rl.filter_groups and not self.group_normalised:
            raise ValueError(
                f"rl.filter_groups=true keeps the groups whose rewards differ, which only matters to an "
                f"algorithm that normalises within a group; rl.algorithm={self.name!r} does not: set "
                f"rl.filter_groups=false"
            )
        if self.group_normalised and rl.samples_per_prompt < 2:
            raise ValueError(
                f"rl.samples_per_prompt must be >= 2: rl.algorithm={self.name!r} normalises rewards within a "
                f"group of samples of one prompt (set rl.samples_per_prompt >= 2; paper: 8)"
            )


class OfflineAlgorithm(RLAlgorithm):
    """Trains on PRM-scored candidates the SFT policy sampled once (Reward-SQL Sec. 5.2)."""

    online = False
    needs_prm = True
    batch_type: ClassVar[type]

    @abc.abstractmethod
    def select(self, candidates: list[dict], rl) -> list:
        """What to train on: items of ``batch``."""

    @abc.abstractmethod
    def batch(self, items: list, *, length: int, pad_id: int):
        """The train batch of one step's items."""

    def summary(self, items: list, candidates: list[dict]) -> dict:
        """What the metrics say about the selection."""
        return {}

    def step_metrics(self, metrics: dict) -> dict:
        """Extra per-step log entries from the train step's metrics."""
        return {}


def register_algorithm(cls: type, *, override: bool = False) -> type:
    """Class decorator: register an instance of ``cls`` under ``cls.name``."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"{cls.__name__} needs a class attribute name = '...' to be registered")
    if not issubclass(cls, (OnlineAlgorithm, OfflineAlgorithm)):
        raise TypeError(f"{cls.__name__} must derive from OnlineAlgorithm or OfflineAlgorithm")
    old = _ALGORITHMS.get(name)
    if old is not None and type(old) is not cls and not override:
        raise ValueError(
            f"an RL algorithm named {name!r} is already registered ({type(old).__module__}."
            f"{type(old).__name__}); pick another name or pass override=True"
        )
    _ALGORITHMS[name] = cls()
    return cls


def get_algorithm(name: str) -> RLAlgorithm:
    """The registered algorithm ``name``; unknown names list the registered ones."""
    try:
        return _ALGORITHMS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown rl.algorithm {name!r}; registered: {', '.join(algorithm_names())}. A new one is "
            f"a class with @rewardsql_jax.rl.register_algorithm in a file loaded with "
            f"plugins=path/to/file.py"
        ) from None


def algorithm_names() -> list[str]:
    return sorted(_ALGORITHMS)


def moved_setting(field: str) -> str | None:
    """The message for an ``rl`` field that became an algorithm's option (``None`` if ``field`` is no such
    field): where it is set now, e.g. ``rl.algorithm_options.rm_coef`` of ``rl.algorithm='grpo'``."""
    for name in algorithm_names():  # the class that declared the move (not a subclass inheriting it)
        option = vars(type(_ALGORITHMS[name])).get("moved_settings", {}).get(field)
        if option is not None:
            return (
                f"rl.{field} moved: use rl.algorithm_options.{option}, an option of rl.algorithm={name!r} "
                f"(command line: rl.algorithm_options.{option}=...; config file: "
                f"RLConfig(algorithm_options={{{option!r}: ...}}))"
            )
    return None


def _option_owners(keys) -> str:
    """`` (rm_coef: an option of rl.algorithm 'grpo')`` for the keys some other registered algorithm has."""
    owners = {k: [n for n in algorithm_names() if k in option_names(_ALGORITHMS[n].options_type)] for k in sorted(keys)}
    found = [f"{k}: an option of rl.algorithm {' / '.join(map(repr, names))}" for k, names in owners.items() if names]
    return f" ({'; '.join(found)})" if found else ""


def policy_loss(rl, algorithm: RLAlgorithm | None = None) -> tuple[str, dict]:
    """(loss name, options) the RL stage trains: the algorithm's loss and its options, or ``rl.loss`` with
    ``rl.loss_options``; the sampler's temperature always scales the log-probs."""
    algorithm = algorithm or get_algorithm(rl.algorithm)
    name = rl.loss or algorithm.loss
    losses.spec(name)  # unknown loss: the registry's message
    options = algorithm.loss_options(rl) if name == algorithm.loss else {}
    return name, {**options, "temperature": rl.temperature, **dict(rl.loss_options or {})}
