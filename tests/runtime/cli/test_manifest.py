"""Manifest values: durations and what is required, with messages naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
from lockgate.runtime.driver.manifest import ManifestError, duration_s, load_manifest


@pytest.mark.parametrize(("text", "seconds"), [("30", 30.0), ("30s", 30.0), ("500ms", 0.5), ("2m", 120.0)])
def test_durations(text: str, seconds: float) -> None:
    assert duration_s(text, "interval") == seconds


def test_a_bad_duration_names_the_field() -> None:
    with pytest.raises(ManifestError, match=r"spec.checkpointing.interval: 'soon' is not a duration"):
        duration_s("soon", "spec.checkpointing.interval")


def test_a_missing_entrypoint_names_the_field(tmp_path: Path) -> None:
    manifest = tmp_path / "job.yaml"
    manifest.write_text("kind: StreamingJob\nmetadata: {name: x}\nspec: {job: {args: {}}}\n")
    with pytest.raises(ManifestError, match=r"spec.job.entrypoint \(module:function\) is required"):
        load_manifest(manifest)
