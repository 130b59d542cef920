"""``kdrill cluster create --kubernetes`` and ``kdrill images build kubernetes-...`` with odd
values: exit 2 with one line naming the option, before Docker is asked anything or a build
starts."""

from __future__ import annotations

import pytest

from harness.cli import cluster as cli_cluster
from harness.cli import main
from harness.kube import images


@pytest.fixture(autouse=True)
def no_docker(tmp_path, monkeypatch):
    monkeypatch.setenv("KDRILL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(cli_cluster, "require_docker", lambda: pytest.fail("Docker asked before the refusal"))
    monkeypatch.setattr(images, "ensure_built", lambda **kw: pytest.fail("a build started before the refusal"))


def refused(capsys, *argv: str) -> str:
    capsys.readouterr()
    assert main(list(argv)) == 2
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err and "Traceback" not in err
    return err


@pytest.mark.parametrize("value, got", [("v1.99.0", "got v1.99.0"), ("kubernetes-v1.34.4", "got kubernetes-v1.34.4"),
                                        ("v1.34.4;id", "got v1.34.4;id"), ("", "got an empty value")])
def test_cluster_create_refuses_a_release_kdrill_does_not_build(capsys, value, got):
    err = refused(capsys, "cluster", "create", "--name", "kdrill-rv-test", "--kubernetes", value)
    assert "--kubernetes: expected one of v1.34.4" in err and err.endswith(got)


@pytest.mark.parametrize("targets, says", [
    (["kubernetes-v1.99.0"], "TARGET: expected one of"),
    (["kubernetes-"], "TARGET: expected one of"),
    (["kubernetes-v1.34.4/../x"], "TARGET: expected one of"),
])
def test_images_build_refuses_a_release_it_does_not_build(capsys, targets, says):
    assert says in refused(capsys, "images", "build", *targets)


def test_another_release_gets_a_cluster_name_of_its_own_and_the_default_release_none():
    import argparse

    from harness.cli.cluster import _release_image

    args = argparse.Namespace(kubernetes="v1.34.4", name=None, config="ha", action="status")
    assert _release_image(args) == "kdrill/node:v1.34.4"
    assert args.name == "kdrill-ha-v1-34-4"  # never kdrill-ha, which would be reused at its own release
    named = argparse.Namespace(kubernetes="v1.34.4", name="mine", config="ha", action="status")
    _release_image(named)
    assert named.name == "mine"
    default = argparse.Namespace(kubernetes="v1.35.4", name=None, config="ha", action="status")
    assert _release_image(default) is None and default.name is None
