"""The API reference (docs/api/, mkdocs.yml): it builds with no broken link or
reference, documents every public name of `lockgate.runtime` and `lockgate.testing`
with a docstring for each of their public methods, and its examples run."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import lockgate.runtime
import lockgate.testing
import pytest

REPO = Path(__file__).resolve().parents[1]
API_PAGES = REPO / "docs" / "api"
BIN = Path(sys.executable).parent


def test_the_site_builds_with_no_broken_link_or_reference(tmp_path: Path) -> None:
    built = subprocess.run(
        [BIN / "mkdocs", "build", "--strict", "--quiet", "--site-dir", tmp_path / "site"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    page = (tmp_path / "site" / "api" / "state" / "index.html").read_text()
    assert "create_accumulator" in page, "the reference is rendered from the docstrings"


def _documented_names() -> set[str]:
    names: set[str] = set()
    for page in API_PAGES.glob("*.md"):
        text = page.read_text()
        names |= set(re.findall(r"^::: lockgate\.(?:runtime|testing)\.(\w+)$", text, re.MULTILINE))
        for members in re.findall(r"members: \[([^\]]+)\]", text):
            names |= {member.strip() for member in members.split(",")}
    return names


@pytest.mark.parametrize("module", [lockgate.runtime, lockgate.testing], ids=lambda m: m.__name__)
def test_every_public_name_has_its_place_in_the_reference(module: Any) -> None:
    # lockgate.testing's ManualClock is lockgate.runtime's, documented there.
    missing = sorted(set(module.__all__) - _documented_names() - {"ManualClock"})
    assert missing == [], f"not in docs/api/*.md: {missing}"


def _undocumented(name: str, obj: Any) -> list[str]:
    if not inspect.isclass(obj):
        return [] if inspect.getdoc(obj) else [name]
    own = vars(obj).get("__doc__")
    if not own or own.startswith(f"{obj.__name__}("):  # none, or the one a dataclass makes up
        return [name]
    missing = []
    for member, value in vars(obj).items():
        function = value.__func__ if isinstance(value, staticmethod | classmethod) else value
        if member.startswith("_") or not (callable(function) or isinstance(function, property)):
            continue
        inherited = any(getattr(getattr(base, member, None), "__doc__", None) for base in obj.__mro__[1:])
        if not function.__doc__ and not inherited:
            missing.append(f"{name}.{member}")
    return missing


@pytest.mark.parametrize("module", [lockgate.runtime, lockgate.testing], ids=lambda m: m.__name__)
def test_every_public_class_and_method_has_a_docstring(module: Any) -> None:
    missing = [m for name in module.__all__ for m in _undocumented(name, getattr(module, name))]
    assert missing == [], f"no docstring: {missing}"


def test_the_examples_of_the_reference_run(tmp_path: Path) -> None:
    ran = subprocess.run(
        [
            BIN / "pytest",
            "--markdown-docs",
            "--markdown-docs-syntax=superfences",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            "-q",
            API_PAGES,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert re.search(r"\b[1-9]\d* passed", ran.stdout), ran.stdout
