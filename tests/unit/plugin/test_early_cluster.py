"""A kind cluster this session creates is made in the background while the tests that need no
cluster run (harness/plugin.py, harness/kube/providers/kind.py BackgroundCreation): the order of the
tests, the hand-over of the creation's result, and the clean-up of a creation no test took.
A stand-in command and fakes take kind's place; the real creation runs in the cluster tests and CI."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace

import pytest

from harness.core.waiting import wait_until
from harness.kube.providers import ProviderError
from harness.kube.providers.kind import BackgroundCreation
from harness.plugin import early_cluster

pytest_plugins = ["pytester"]

def test_the_tests_that_need_no_cluster_run_first_in_their_own_order(pytester):
    pytester.makepyfile(test_a="def test_a1(kdrill_cluster): pass\ndef test_a2(): pass\n",
                        test_b="def test_b1(): pass\ndef test_b2(kdrill_cluster): pass\ndef test_b3(): pass\n")
    # A listing: nothing is created early (_create_cluster_early leaves --collect-only alone).
    result = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider")
    order = [line.split("::")[1] for line in result.outlines if "::" in line]
    assert order == ["test_a2", "test_b1", "test_b3", "test_a1", "test_b2"], result.outlines


def test_a_cluster_name_kind_would_refuse_is_a_usage_error_before_any_test(pytester):
    pytester.makepyfile(test_a="def test_a1(kdrill_cluster): pass\n")
    result = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider",
                                           "--kdrill-cluster-name=Bad Name!")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--kdrill-cluster-name / KDRILL_CLUSTER_NAME: expected a kind cluster name" in result.stderr.str()


@pytest.fixture(autouse=True)
def logs_in_tmp_path(monkeypatch, tmp_path):
    """The creations' log files go to the test's own directory."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


class FakeProvider:
    name = "kdrill-x"

    def __init__(self, made: bool = True):
        self.made, self.deleted = made, False

    def exists(self) -> bool:
        return self.made and not self.deleted

    def delete(self) -> None:
        self.deleted = True


def test_a_background_creation_hands_over_its_seconds_once_the_child_has_ended():
    creation = BackgroundCreation(FakeProvider(), command=[sys.executable, "-c", "import time; time.sleep(0.5); print('made')"])
    assert not creation.done
    seconds = creation.result()
    assert creation.done and 0.4 < seconds < 30 and creation.output().strip() == "made"
    assert creation.result() == seconds  # a second call, same answer
    creation.close()
    assert not creation.log_path.exists()


def test_the_seconds_are_the_creations_own_not_the_wait_until_someone_asked():
    started = time.monotonic()
    creation = BackgroundCreation(FakeProvider(), command=[sys.executable, "-c", "pass"])
    assert wait_until(lambda: creation.done, 30, interval_seconds=0.02).ok
    seen_done = time.monotonic() - started
    time.sleep(1.0)  # asked a second after the end, on purpose: the answer must not include it
    assert creation.result() <= seen_done


def test_a_failed_background_creation_raises_with_the_end_of_its_output():
    creation = BackgroundCreation(FakeProvider(), command=[
        sys.executable, "-c", "import sys; print('\\n'.join(f'line {i}' for i in range(40))); sys.exit(3)"])
    with pytest.raises(ProviderError, match=r"(?s)exited 3.*line 39") as failed:
        creation.result()
    assert "line 20" not in str(failed.value)  # the end, not all of it


def test_the_background_creation_is_a_child_process_out_of_reach_of_this_ones_fakes(monkeypatch):
    # A unit test may replace subprocess.run meanwhile; the child runs on its own.
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("the fake reached the creation"))
    creation = BackgroundCreation(FakeProvider(), command=[
        sys.executable, "-c", "import subprocess, sys; subprocess.run([sys.executable, '-c', 'print(1)'], check=True)"])
    assert creation.result() >= 0


class FakeCreation:
    def __init__(self, outcome):
        self.outcome, self.stopped, self.closed = outcome, False, False

    def result(self) -> float:
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome

    def stop(self) -> None:
        self.stopped = True

    def close(self) -> None:
        self.closed = True


class FakeLock:
    released = False

    def release(self) -> None:
        self.released = True


def config_with(early, keep: bool = False):
    return SimpleNamespace(_kdrill_early_cluster=early,
                           getoption=lambda name: keep if name == "--kdrill-keep-cluster" else None)


def test_a_cluster_created_early_that_no_test_took_is_deleted_and_its_lock_released():
    provider, lock = FakeProvider(), FakeLock()
    config = config_with((provider, lock, FakeCreation(30.0)))
    early_cluster.drop_unused_early_cluster(config)
    assert provider.deleted and lock.released and config._kdrill_early_cluster is None


def test_kept_when_asked_and_a_failed_creation_still_releases_the_lock():
    provider, lock = FakeProvider(), FakeLock()
    early_cluster.drop_unused_early_cluster(config_with((provider, lock, FakeCreation(30.0)), keep=True))
    assert not provider.deleted and lock.released
    failed, lock = FakeProvider(made=False), FakeLock()
    early_cluster.drop_unused_early_cluster(config_with((failed, lock, FakeCreation(ProviderError("boom")))))
    assert not failed.deleted and lock.released  # nothing was made, nothing to delete


def test_a_creation_still_running_is_stopped_not_waited_for():
    creation = BackgroundCreation(FakeProvider(), command=[sys.executable, "-c", "import time; time.sleep(120)"])
    provider, lock = FakeProvider(), FakeLock()
    started = time.monotonic()
    early_cluster.drop_unused_early_cluster(config_with((provider, lock, creation)))
    assert time.monotonic() - started < 30 and creation.done
    assert provider.deleted and lock.released and not creation.log_path.exists()


def test_a_failed_delete_is_logged_with_what_to_do_and_the_lock_still_released(caplog):
    class Undeletable(FakeProvider):
        def delete(self) -> None:
            raise ProviderError("docker: no such container")

    provider, lock = Undeletable(), FakeLock()
    early_cluster.drop_unused_early_cluster(config_with((provider, lock, FakeCreation(30.0))))
    assert lock.released
    assert "not deleted: docker: no such container; `kdrill cluster delete --name kdrill-x`" in caplog.text


def test_nothing_is_created_early_when_collection_failed(monkeypatch):
    monkeypatch.setattr("harness.cli.doctor.docker_problem", lambda: pytest.fail("asked Docker after a collection error"))
    item = SimpleNamespace(fixturenames=["kdrill_cluster"])
    config = SimpleNamespace(option=SimpleNamespace(collectonly=False, showfixtures=False, show_fixtures_per_test=False,
                                                    continue_on_collection_errors=False),
                             getoption=lambda name: None)
    session = SimpleNamespace(config=config, items=[item, SimpleNamespace(fixturenames=[])], testsfailed=1)
    early_cluster.create_cluster_early(session)
    assert not hasattr(config, "_kdrill_early_cluster")


def test_nothing_to_drop_when_the_fixture_took_it():
    config = config_with(None)
    early_cluster.drop_unused_early_cluster(config)
    assert config._kdrill_early_cluster is None
