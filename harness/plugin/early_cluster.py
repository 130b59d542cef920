"""A kind cluster created early: when the session will create its cluster and has tests that need
none, the creation starts in the background at the end of collection while those tests run;
``kdrill_cluster`` takes it over, or the session's end deletes it when no test took it."""

from __future__ import annotations

import logging

import pytest

import harness.cli.doctor as doctor
from harness.kube.images import Build
from harness.kube.session_lock import SessionLock
from harness.plugin.cluster import kind_provider

log = logging.getLogger("kdrill.plugin")


def create_cluster_early(session: pytest.Session) -> None:
    """When this session will create its kind cluster and has tests that need none, start the
    creation now, in a child process (``config._kdrill_early_cluster``, KindProvider's
    BackgroundCreation): those tests run meanwhile (about 2.5 minutes of kdrill's own, measured). Only
    the plain case (no existing cluster, no platform profile, images built, Docker up, the cluster
    absent); otherwise, and on any doubt, kdrill_cluster creates it in line and says why it
    cannot."""
    config = session.config
    opt = config.getoption
    if (config.option.collectonly or getattr(config.option, "showfixtures", False)
            or getattr(config.option, "show_fixtures_per_test", False)
            or opt("--kdrill-kubeconfig") or opt("--kdrill-context") or opt("--kdrill-platform")):
        return
    if session.testsfailed and not config.option.continue_on_collection_errors:
        return  # collection errors: pytest will run nothing
    needing = sum("kdrill_cluster" in getattr(item, "fixturenames", ()) for item in session.items)
    if needing == 0 or needing == len(session.items):
        return
    try:
        if doctor.docker_problem() or Build().missing():
            return
        provider = kind_provider(config)
        if provider.exists():
            return
        lock = SessionLock(provider.name).acquire()
    except Exception as exc:  # ProviderError, ClusterBusy: kdrill_cluster meets it again and reports it
        log.info("kind cluster not created early: %s", exc)
        return
    try:
        creation = provider.create_in_background()
    except Exception as exc:  # no child started: kdrill_cluster creates it in line
        lock.release()
        log.info("kind cluster not created early: %s", exc)
        return
    config._kdrill_early_cluster = (provider, lock, creation)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"kdrill: creating kind cluster {provider.name} in the background (log: "
                            f"{creation.log_path}) while the {len(session.items) - needing} test(s) that "
                            "need no cluster run")


def drop_unused_early_cluster(config: pytest.Config) -> None:
    """A cluster created early that no test took (the session was interrupted or stopped early, or
    every test that needed it was skipped): stop its creation if still running, delete what kind
    made unless kept, release the lock. Never raises: a failure is logged with what to do."""
    early = getattr(config, "_kdrill_early_cluster", None)
    if early is None:
        return
    provider, lock, creation = early
    config._kdrill_early_cluster = None
    try:
        creation.stop()
        if not config.getoption("--kdrill-keep-cluster") and provider.exists():
            provider.delete()
        creation.close()
    except Exception as exc:
        log.warning("kind cluster %s, created early and not used, not deleted: %s; `kdrill cluster delete "
                    "--name %s` deletes it", provider.name, exc, provider.name)
    finally:
        lock.release()
