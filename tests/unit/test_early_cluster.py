"""A kind cluster this session creates is made in the background while the tests that need no
cluster run (harness/plugin.py, harness/providers/kind.py BackgroundCreation): the order of the
tests, the hand-over of the creation's result, and the clean-up of a creation no test took.
Fakes stand in for kind; the real creation runs in the cluster tests and CI."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from harness import plugin
from harness.providers import ProviderError
from harness.providers.kind import BackgroundCreation

pytest_plugins = ["pytester"]

def test_the_tests_that_need_no_cluster_run_first_in_their_own_order(pytester):
    pytester.makepyfile(test_a="def test_a1(kdrill_cluster): pass\ndef test_a2(): pass\n",
                        test_b="def test_b1(): pass\ndef test_b2(kdrill_cluster): pass\ndef test_b3(): pass\n")
    # A listing: nothing is created early (_create_cluster_early leaves --collect-only alone).
    result = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider")
    order = [line.split("::")[1] for line in result.outlines if "::" in line]
    assert order == ["test_a2", "test_b1", "test_b3", "test_a1", "test_b2"], result.outlines


class FakeProvider:
    name = "kdrill-x"

    def __init__(self, outcome, gate: threading.Event | None = None):
        self.outcome, self.gate, self.deleted, self.made = outcome, gate, False, False

    def create(self) -> float:
        if self.gate is not None:
            self.gate.wait(10)
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        self.made = True
        return self.outcome

    def exists(self) -> bool:
        return self.made and not self.deleted

    def delete(self) -> None:
        self.deleted = True


def test_a_background_creation_hands_over_its_seconds_once_it_has_ended():
    gate = threading.Event()
    creation = BackgroundCreation(FakeProvider(42.5, gate))
    assert not creation.done
    gate.set()
    assert creation.result() == 42.5 and creation.done
    assert creation.result() == 42.5  # a second call, same answer


def test_a_background_creation_raises_its_error_in_the_thread_that_waits():
    creation = BackgroundCreation(FakeProvider(ProviderError("kind create failed: no node image")))
    with pytest.raises(ProviderError, match="no node image"):
        creation.result()


class FakeLock:
    released = False

    def release(self) -> None:
        self.released = True


def config_with(early, keep: bool = False):
    return SimpleNamespace(_kdrill_early_cluster=early,
                           getoption=lambda name: keep if name == "--kdrill-keep-cluster" else None)


def test_a_cluster_created_early_that_no_test_took_is_deleted_and_its_lock_released():
    provider, lock = FakeProvider(30.0), FakeLock()
    config = config_with((provider, lock, BackgroundCreation(provider)))
    plugin._drop_unused_early_cluster(config)
    assert provider.deleted and lock.released and config._kdrill_early_cluster is None


def test_kept_when_asked_and_a_failed_creation_still_releases_the_lock():
    provider, lock = FakeProvider(30.0), FakeLock()
    plugin._drop_unused_early_cluster(config_with((provider, lock, BackgroundCreation(provider)), keep=True))
    assert provider.made and not provider.deleted and lock.released
    failed, lock = FakeProvider(ProviderError("boom")), FakeLock()
    plugin._drop_unused_early_cluster(config_with((failed, lock, BackgroundCreation(failed))))
    assert not failed.deleted and lock.released  # nothing was made, nothing to delete


def test_nothing_to_drop_when_the_fixture_took_it():
    config = config_with(None)
    plugin._drop_unused_early_cluster(config)
    assert config._kdrill_early_cluster is None
