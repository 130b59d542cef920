"""The example profile clusters/platforms/gatekeeper: what its preparation changes in Gatekeeper's
published manifest (clusters/platforms/gatekeeper.py, pure text), and a profile's ``prepare``
files (harness/platform/profile.py). The profile itself is built and drilled on a cluster."""

from __future__ import annotations

import importlib.util
import io
import shutil
import tarfile
from pathlib import Path

import pytest

from harness.core import resources
from harness.platform.profile import ProfileError, load

PROFILE = resources.clusters_dir() / "platforms" / "gatekeeper"
SCRIPT = resources.clusters_dir() / "platforms" / "gatekeeper.py"


def _script():
    spec = importlib.util.spec_from_file_location("gatekeeper_profile", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _published(image: str, policy: str = "Always", containers: int = 2) -> str:
    one = ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: gk}\nspec:\n  template:\n    spec:\n"
           "      containers:\n      - name: manager\n"
           f"        image: {image}\n        imagePullPolicy: {policy}\n")
    return "---\n".join([one] * containers)


def test_localise_changes_the_image_and_pull_policy_only():
    gk = _script()
    published = _published(gk.PUBLISHED_IMAGE)
    out = gk.localise(published, "docker.io/kdrill/gatekeeper:v0")
    assert out.count("image: docker.io/kdrill/gatekeeper:v0\n") == 2
    assert out.count("imagePullPolicy: IfNotPresent\n") == 2
    assert out.startswith("# OPA Gatekeeper ")
    body = out.split("\n", 3)[3]  # below the three header lines, the published text otherwise as it was
    assert body == published.replace(gk.PUBLISHED_IMAGE, "docker.io/kdrill/gatekeeper:v0").replace(
        "Always", "IfNotPresent")


@pytest.mark.parametrize("published", [
    _published("openpolicyagent/gatekeeper:v9.9.9"),     # another version's image
    _published("PUBLISHED", policy="IfNotPresent"),      # no Always to change
    _published("PUBLISHED", containers=3),               # another layout
    # one container, and the same words inside other keys: whole lines only are counted
    _published("PUBLISHED", containers=1) + "metadata:\n  annotations:\n    previousimage: PUBLISHED\n"
    "    keepimagePullPolicy: Always\n",
])
def test_localise_refuses_a_manifest_of_another_layout(published):
    gk = _script()
    with pytest.raises(ValueError, match="not the layout this script knows"):
        gk.localise(published.replace("PUBLISHED", gk.PUBLISHED_IMAGE), "docker.io/kdrill/gatekeeper:v0")


@pytest.fixture
def prepared(tmp_path) -> Path:
    target = tmp_path / "gatekeeper"
    shutil.copytree(PROFILE, target, ignore=shutil.ignore_patterns("10-gatekeeper.yaml", "images"))
    (target / "manifests" / "10-gatekeeper.yaml").write_text(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: gatekeeper-system}\n")
    (target / "images").mkdir()
    with tarfile.open(target / "images" / "gatekeeper.tar", "w") as tar:  # what docker save writes first
        data = b"[]"
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return target


def test_the_profile_loads_once_prepared(prepared):
    profile = load(prepared)
    assert profile.name == "gatekeeper"
    assert [p.name for p in profile.manifests][0] == "10-gatekeeper.yaml"
    assert "gatekeeper-check.kdrill.internal" in profile.corefile


@pytest.mark.parametrize("missing", ["manifests/10-gatekeeper.yaml", "images/gatekeeper.tar"])
def test_a_missing_prepared_file_names_the_command(prepared, missing):
    (prepared / missing).unlink()
    with pytest.raises(ProfileError) as err:
        load(prepared)
    assert err.value.path.endswith(missing) and err.value.got == "no such file"
    assert "python3 clusters/platforms/gatekeeper.py" in err.value.expected


def test_every_missing_prepared_file_is_named(tmp_path):
    unprepared = tmp_path / "gatekeeper"  # as a fresh clone has it
    shutil.copytree(PROFILE, unprepared, ignore=shutil.ignore_patterns("10-gatekeeper.yaml", "images"))
    with pytest.raises(ProfileError) as err:
        load(unprepared)
    assert err.value.path.endswith("images/gatekeeper.tar")
    assert err.value.got == "no such file; also missing: manifests/10-gatekeeper.yaml"


@pytest.mark.parametrize("prepare", [
    "python3 x.py",                                                   # not a mapping
    {"command": "python3 x.py"},                                      # no files
    {"command": "", "files": ["images/a.tar"]},                       # no command
    {"command": "python3 x.py", "files": ["../outside.tar"]},         # outside the profile
    {"command": "python3 x.py", "files": ["/etc/passwd"]},
    {"command": "python3 x.py", "files": ["platform.yaml"]},          # not a profile part
    {"command": "python3 x.py", "files": ["."]},
    {"command": "python3 x.py", "files": ["./"]},
    {"command": "python3 x.py", "files": ["manifests/.10-g.yaml"]},   # hidden: the loader would skip it
    {"command": "python3 x.py", "files": ["images/sub/x.tar"]},       # the loader reads images/*.tar only
    {"command": "python3 x.py", "files": ["manifests/a.txt"]},
    {"command": "python3 x.py", "files": ["coredns/Other"]},
    {"command": "python3 x.py", "files": ["images/gatekeeper.tar", "./images/gatekeeper.tar"]},  # twice
])
def test_a_bad_prepare_is_refused(prepared, prepare):
    import yaml

    meta = yaml.safe_load((prepared / "platform.yaml").read_text())
    meta["prepare"] = prepare
    (prepared / "platform.yaml").write_text(yaml.safe_dump(meta))
    with pytest.raises(ProfileError) as err:
        load(prepared)
    assert err.value.where.startswith("prepare")


@pytest.mark.parametrize("argv, said", [
    (["images", "build", "kyverno"], "kdrill images build: TARGET: expected one of gatekeeper, observability, "
                                     "kubernetes-v1.34.4, got kyverno"),
    (["images", "status", "gatekeeper"], "kdrill images status: TARGET: expected none, got gatekeeper"),
])
def test_an_unknown_image_target_is_refused_before_docker(monkeypatch, capsys, argv, said):
    from harness import cli
    from harness.cli import doctor

    monkeypatch.setattr(doctor, "docker_problem", lambda: pytest.fail("Docker must not be asked"))
    assert cli.main(argv) == 2
    assert said in capsys.readouterr().err


def test_doctor_does_not_ask_for_the_on_request_image(monkeypatch):
    from harness.cli import doctor
    from harness.kube import images

    monkeypatch.setattr(images.Step, "done", lambda step: step.name not in ("go-gatekeeper", "gatekeeper"))
    assert doctor.check_images().ok
    monkeypatch.setattr(images.Step, "done", lambda step: step.name != "node")
    check = doctor.check_images()
    assert not check.ok and check.detail.endswith(": node")


def test_building_gatekeeper_without_go_says_go_is_missing(monkeypatch):
    from harness.kube import images

    monkeypatch.setattr(images.Step, "done", lambda step: step.name not in ("go-gatekeeper", "gatekeeper"))
    asked = {}

    def missing_build_tools(go, debootstrap):
        asked.update(go=go, debootstrap=debootstrap)
        return ["go (Go 1.24+)"] if go else []
    monkeypatch.setattr(images, "missing_build_tools", missing_build_tools)
    monkeypatch.setattr(images.Build, "build_all", lambda *a, **k: pytest.fail("must not build without Go"))
    with pytest.raises(images.BuildError, match="missing go"):
        images.ensure_built(progress=lambda line: None, targets=["gatekeeper"])
    assert asked == {"go": True, "debootstrap": False}


def test_a_prepared_path_that_is_a_directory_says_so(prepared):
    import yaml

    meta = yaml.safe_load((prepared / "platform.yaml").read_text())
    meta["prepare"]["files"].append("files/made")
    (prepared / "files" / "made").mkdir(parents=True)
    (prepared / "platform.yaml").write_text(yaml.safe_dump(meta))
    with pytest.raises(ProfileError) as err:
        load(prepared)
    assert err.value.got == "'made/' (a directory)"


def test_the_cheap_errors_come_before_a_missing_prepared_file(prepared):
    """A bad name is said first: the author should not run a minutes-long command to learn it."""
    import yaml

    (prepared / "images" / "gatekeeper.tar").unlink()
    meta = yaml.safe_load((prepared / "platform.yaml").read_text())
    meta["name"] = "BAD NAME"
    (prepared / "platform.yaml").write_text(yaml.safe_dump(meta))
    with pytest.raises(ProfileError) as err:
        load(prepared)
    assert err.value.where == "name"
