"""Every command block of README.md runs as written in a fresh clone after `make run`'s preparation.

Convention: shell commands sit in ```sh (or ```bash) fences; ```console fences hold a session whose commands
are the lines starting with "$ ". A block that must not run here (it serves until Ctrl-C, needs a running
portal, outside systems or long runs) is preceded by `<!-- readme-test: skip (why) -->`. A fence without a
language fails the test, so that no command escapes it unlabelled.

The clone is prepared as `make run` does up to serving (`scripts/run.sh --prepare`: var/dev.env, migrate,
seed, admin), then each block runs in bash (`set -euo pipefail`) from the clone's root with the environment
of a new shell, in README order: a block may use what an earlier one made.
"""

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fresh_clone import REPO_ROOT, copy_clone, shell_env

pytestmark = pytest.mark.slow(reason="a clone, migrate + seed, every README command")

SHELL_LANGUAGES = {"sh", "bash", "shell", "console"}
FENCE = re.compile(r"^```(?P<language>[\w-]*)\s*$")
SKIP = re.compile(r"^<!-- readme-test: skip \((?P<reason>[^)]+)\) -->$")


@dataclass
class Block:
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    skip: str | None  # why it is not run

    @property
    def script(self) -> str:
        if self.language != "console":
            return self.text
        return "\n".join(line[2:] for line in self.text.splitlines() if line.startswith("$ "))


def readme_blocks(markdown: str) -> list[Block]:
    blocks, lines, index = [], markdown.splitlines(), 0
    while index < len(lines):
        if opening := FENCE.match(lines[index]):
            end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
            previous = lines[index - 1] if index else ""
            skip = SKIP.match(previous)
            blocks.append(
                Block(
                    line=index + 1,
                    language=opening["language"],
                    text="\n".join(lines[index + 1 : end]),
                    skip=skip and skip["reason"],
                )
            )
            index = end
        index += 1
    return blocks


BLOCKS = readme_blocks((REPO_ROOT / "README.md").read_text())
RUN = [block for block in BLOCKS if block.language in SHELL_LANGUAGES and not block.skip]


def test_the_convention_finds_the_readme_commands():
    unlabelled = [block.line for block in BLOCKS if not block.language]
    assert not unlabelled, (
        f"README.md code blocks without a language (```sh, ```json, ...) at lines {unlabelled}"
    )
    assert len(RUN) >= 2, [block.line for block in BLOCKS]
    assert any("ingest_nvidia_smi" in block.text for block in RUN)
    assert any("manage.py simulate" in block.text for block in RUN)
    # Skipped blocks say why, and a marker on anything but a command block is a mistake.
    assert all(block.language in SHELL_LANGUAGES for block in BLOCKS if block.skip)


def test_parsing_skips_marked_blocks_and_keeps_console_commands():
    blocks = readme_blocks(
        "<!-- readme-test: skip (serves forever) -->\n```sh\nmake run\n```\n"
        "```console\n$ echo one\none\n$ echo two\n```\n```json\n{}\n```\n"
    )
    assert [(block.language, block.skip) for block in blocks] == [
        ("sh", "serves forever"),
        ("console", None),
        ("json", None),
    ]
    assert blocks[1].script == "echo one\necho two"


@pytest.fixture(scope="module")
def clone(prepared_clone_template, tmp_path_factory) -> Path:
    """One copy of the session's prepared clone for the module: the blocks run in README order in it."""
    clone = copy_clone(prepared_clone_template, tmp_path_factory.mktemp("readme") / "rackplane")
    assert (clone / "var" / "dev.env").is_file()
    return clone


@pytest.mark.parametrize("block", RUN, ids=[f"README.md:{block.line}" for block in RUN])
def test_readme_command_block_runs_as_written(clone, block):
    result = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + block.script],
        cwd=clone,
        env=shell_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = f"README.md line {block.line}:\n{block.script}\n--- stdout\n{result.stdout}\n--- stderr\n"
    report += result.stderr
    assert result.returncode == 0, report
    assert "Traceback" not in result.stderr, report


def test_without_the_development_file_manage_py_is_in_production_mode(clone):
    """RACKPLANE_DEV_ENV=0 (as the test suite runs) ignores var/dev.env: DEBUG unset is production mode,
    which still refuses to start without a SECRET_KEY."""
    result = subprocess.run(
        [".venv/bin/python", "manage.py", "check"],
        cwd=clone,
        env=shell_env(RACKPLANE_DEV_ENV="0"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "ImproperlyConfigured: SECRET_KEY is missing" in result.stderr
