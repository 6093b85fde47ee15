"""Every command the README and the docs pages give still runs as written, as far as it can without its data or
its hours: each ``python launch/run.py ...`` line resolves to a valid config exactly as ``launch/run.py`` reads it
(its config file, plugins, plan options and overrides; a renamed setting or a bad value fails here), and each
``python <script>`` / ``python -m <module>`` names a file or module that exists. The plugin examples run for real
in ``tests/test_plugins.py``; the main job and the smoke config run in the pipeline tests."""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND = re.compile(r"^\s*(?:\$ )?(?:[A-Z_]+=\S+ )*(python (?:-m )?\S+.*)$")


def documented_commands() -> list[tuple[str, str]]:
    """(page, command) of each code-block line and each inline code span that runs ``python``; placeholders
    (``...``) are left out."""
    found = []
    for page in PAGES:
        for line in page.read_text().splitlines():
            m = COMMAND.match(line)
            code = line.split("`")[1::2]  # the inline code spans
            spans = [m.group(1)] if m and "`" not in line else [c[c.index("python ") :] for c in code if "python " in c]
            for span in spans:
                command = span.split("  #")[0].split(" # ")[0].rstrip('"').strip()
                if "..." not in command:
                    found.append((page.relative_to(ROOT).as_posix(), command))
    return sorted(set(found))


COMMANDS = documented_commands()


def test_the_pages_give_commands():
    pages = {page for page, _ in COMMANDS}
    assert "README.md" in pages and len(COMMANDS) >= 15, COMMANDS


@pytest.mark.parametrize(
    "page,command", [c for c in COMMANDS if " launch/run.py" in c[1]], ids=lambda x: x if x.endswith(".md") else ""
)
def test_each_launch_command_resolves_to_a_valid_config(page, command):
    from rewardsql_jax.config import apply_overrides, load_config
    from rewardsql_jax.planning.launch import split_plan_overrides

    args = shlex.split(command)[2:]
    config_file = str(ROOT / "configs" / "default.py")
    if "--config" in args:
        i = args.index("--config")
        config_file = str(ROOT / args[i + 1])
        args = args[:i] + args[i + 2 :]
    if any(a.startswith("plugins=") for a in args):
        pytest.skip("a plugin example: tests/test_plugins.py runs it with its file")
    _, overrides = split_plan_overrides(args)
    config = apply_overrides(load_config(config_file), overrides)
    for override in overrides:
        key, value = override.split("=", 1)
        got = config
        for part in key.split("."):
            got = got[part] if isinstance(got, dict) else getattr(got, part)
        if isinstance(got, bool) or isinstance(got, str):
            assert str(got).lower() == value.lower(), (page, override, got)
        elif isinstance(got, (int, float)):
            assert float(got) == float(value), (page, override, got)


@pytest.mark.parametrize(
    "page,command", [c for c in COMMANDS if " launch/run.py" not in c[1]], ids=lambda x: x if x.endswith(".md") else ""
)
def test_each_other_command_names_what_exists(page, command):
    args = shlex.split(command)
    if args[1] == "-m":
        if args[2] == "pytest":
            assert (ROOT / "tests").is_dir()
            return
        assert importlib.util.find_spec(args[2]) is not None, (page, command)
    else:
        assert (ROOT / args[1]).is_file(), (page, command)
