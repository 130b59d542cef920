"""Fixtures of the evidence tests: a clean signing environment, and an external signer that keeps
its key from the runner (sealed_runs.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from sealed_runs import ExternalSigner, make_external_signer

from harness.evidence.heads import HEAD_LOG_ENV
from harness.evidence.manifest import SIGNING_KEY_ENV
from harness.evidence.signers import SIGNER_ENV, SIGNER_PUBLIC_KEY_ENV
from harness.evidence.signing_keys import TRUSTED_ENV


@pytest.fixture(autouse=True)
def signing_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private state directory (the local key is created there, never in ~) and none of the
    signing, trust or head variables of the environment the tests were started in."""
    state = tmp_path / "state"
    monkeypatch.setenv("KDRILL_STATE_DIR", str(state))
    for name in (SIGNING_KEY_ENV, SIGNER_ENV, SIGNER_PUBLIC_KEY_ENV, TRUSTED_ENV, HEAD_LOG_ENV):
        monkeypatch.delenv(name, raising=False)
    return state


@pytest.fixture
def external_signer() -> Iterator[ExternalSigner]:
    """sealed_runs.make_external_signer: uid 65534's signer when the tests run as root."""
    yield from make_external_signer()
