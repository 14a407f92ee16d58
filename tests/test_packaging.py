"""The package's metadata in pyproject.toml: the licence is an SPDX expression (PEP 639),
with a setuptools that reads it."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_license_is_an_spdx_string():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["license"] == "BSD-3-Clause"  # PEP 639; the table form is deprecated
    assert any(r.replace(" ", "").startswith("setuptools>=77") for r in project["build-system"]["requires"])
