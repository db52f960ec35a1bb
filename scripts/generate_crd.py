"""Writes the StreamingJob CRD, generated from the spec's model (lockgate.operator.crd),
to crds/ and to the Helm chart's copy. Run it after changing the model:
    .venv/bin/python scripts/generate_crd.py
tests/operator/test_crd.py fails while a checked-in copy differs from what it writes."""

from __future__ import annotations

from pathlib import Path

from lockgate.operator.crd import render

REPO = Path(__file__).resolve().parents[1]
CRD_COPIES = (REPO / "crds" / "streamingjob.yaml", REPO / "helm" / "lockgate" / "crds" / "streamingjob.yaml")


def main() -> None:
    text = render()
    for path in CRD_COPIES:
        path.write_text(text)
        print(f"wrote {path.relative_to(REPO)}")


if __name__ == "__main__":
    main()
