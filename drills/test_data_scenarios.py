"""Every data-only scenario (a ``runner`` section, no drill file), run by harness/engine/runner.py: one
test case per scenario case, each marked with its scenario (see the plugin)."""

from __future__ import annotations

import pytest

from harness.engine import runner


@pytest.mark.cluster
@pytest.mark.destructive
@pytest.mark.data_scenarios
def test_data_scenario(drill):
    runner.run(drill)
