"""Platform profiles (harness/platform/profile.py): what a profile directory may hold, its hash,
the kind config built from it, and why a cluster is refused as not the profile's. Pure logic: the
cluster test (tests/cluster/test_platform_cluster.py) builds one."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import types
from pathlib import Path

import pytest
import yaml

from harness.core import resources
from harness.platform.profile import NODE_FILES_DIR, ProfileError, kind_config, load, mismatch, recorded

EXAMPLE = resources.clusters_dir() / "platforms" / "example"
CM = "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}}}\n"
# Ten lines, 9**9 lists once expanded: the "billion laughs".
LAUGHS = CM.format(name="lol", ns="default") + "data:\n  a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 10))




def nested_aliases(levels: int, width: int = 10) -> str:
    """A YAML flow list of ``levels`` anchors, each used ten times by the next: a few hundred bytes,
    ``width`` * 10**(levels - 1) strings once expanded."""
    return "[" + ", ".join([f"&a0 [{', '.join(['x'] * width)}]"] + [
        f"&a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, levels)]) + "]"


@pytest.fixture
def profile_dir(tmp_path) -> Path:
    target = tmp_path / "platform"
    shutil.copytree(EXAMPLE, target)
    return target


def test_the_example_profile_loads(profile_dir):
    profile = load(profile_dir)
    assert profile.name == "example"
    assert profile.corefile and "platform-check.kdrill.internal" in profile.corefile
    assert [p.name for p in profile.manifests] == ["configmap-policy.yaml", "policy-webhook.yaml"]
    assert profile.webhook_tls == {"service": "policy-webhook", "namespace": "platform-policy"}
    assert len(profile.kubeadm_patches) == 1 and profile.has_node_files
    assert "README.md" not in profile.files and "files/audit-policy.yaml" in profile.files
    assert len(profile.hash) == 64


def test_the_hash_follows_every_file_but_the_readme(profile_dir):
    before = load(profile_dir).hash
    (profile_dir / "README.md").write_text("another text")
    assert load(profile_dir).hash == before
    with (profile_dir / "files" / "audit-policy.yaml").open("a") as f:
        f.write("# one more line\n")
    assert load(profile_dir).hash != before
    again = load(profile_dir).hash
    (profile_dir / "files" / "audit-policy.yaml").rename(profile_dir / "files" / "audit.yaml")
    assert load(profile_dir).hash != again  # a renamed file is another profile too


@pytest.mark.parametrize("change, where, got", [
    (lambda d: (d / "platform.yaml").unlink(), "file", "no such file"),
    (lambda d: (d / "platform.yaml").write_text("name: Example\ndescription: x\n"), "name", "'Example'"),
    (lambda d: (d / "platform.yaml").write_text("name: a-name-far-too-long-for-kind\ndescription: x\n"), "name",
     "'a-name-far-too-long-for-kind'"),
    (lambda d: (d / "platform.yaml").write_text("name: ok\n"), "description", "None"),
    (lambda d: (d / "platform.yaml").write_text("name: ok\ndescription: x\nflags: []\n"), "flags", "'flags'"),
    (lambda d: (d / "manifest").mkdir(), "entry", "'manifest/'"),
    (lambda d: (d / "kubeadm" / "x.yaml").write_text("kind: Cluster\n"), "kind", "'Cluster'"),
    (lambda d: (d / "kubeadm" / "notes.txt").write_text("x"), "file", "'notes.txt'"),
    (lambda d: (d / "manifests" / "x.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n"),
     "document 1.metadata.name", "None"),
    (lambda d: (d / "manifests" / "x.yaml").write_text("kind: ConfigMap\nmetadata: {name: a}\n"),
     "document 1.apiVersion", "None"),
    (lambda d: (d / "manifests" / "x.yaml").write_text("a: [\n"), "content", "unparseable YAML"),
    (lambda d: (d / "coredns" / "Corefile").write_text(".:53 {\n  errors\n"), "content",
     "unbalanced braces (a block is not closed)"),
    (lambda d: (d / "coredns" / "Corefile.orig").write_text("x"), "entries", "['Corefile', 'Corefile.orig']"),
    (lambda d: ((d / "images").mkdir(), (d / "images" / "app.tgz").write_text("x")), "file", "'app.tgz'"),
    # These raised a traceback (UnicodeDecodeError, IsADirectoryError, RecursionError) or said
    # nothing of what was there.
    (lambda d: (d / "coredns" / "Corefile").write_bytes(b".:53 {\n  errors \xff\n}\n"), "content",
     "byte 0xff at offset 16, not UTF-8"),
    (lambda d: ((d / "coredns" / "Corefile").unlink(), (d / "coredns" / "Corefile").mkdir()), "file",
     "'Corefile/' (a directory)"),
    (lambda d: (d / "kubeadm" / "list.yaml").write_text("- kind: ClusterConfiguration\n"), "content", "a list"),
    (lambda d: ((d / "images").mkdir(), (d / "images" / "app.tar").mkdir()), "file", "'app.tar/' (a directory)"),
    (lambda d: (d / "manifests" / "deep.yaml").write_text("a: " + "[" * 5000 + "]" * 5000 + "\n"), "content",
     "nested deeper"),
    # These loaded, and failed only once the cluster was up (kind or kubectl refusing them, the
    # apply retried for minutes first), or were silently changed on the way.
    (lambda d: (d / "platform.yaml").write_text('name: "ok\\n"\ndescription: x\n'), "name", "'ok\\n'"),
    (lambda d: (d / "manifests" / "empty.yaml").write_text("# rendered nothing\n---\n"), "content", "none"),
    (lambda d: (d / "manifests" / "x.yaml").write_text("---\n~\n---\n- a\n"), "document 2", "list"),
    (lambda d: (d / "manifests" / "x.yaml").write_text(CM.format(name="a/b", ns="default")), "document 1.metadata.name",
     "'a/b'"),
    (lambda d: (d / "manifests" / "x.yaml").write_text(CM.format(name="My_Config", ns="default")),
     "document 1.metadata.name", "'My_Config'"),
    (lambda d: (d / "manifests" / "x.yaml").write_text(
        "apiVersion: v1\nkind: Service\nmetadata: {name: 9-lives, namespace: default}\n"),
     "document 1.metadata.name", "'9-lives'"),
    (lambda d: (d / "manifests" / "x.yaml").write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: a.b}\n"),
     "document 1.metadata.name", "'a.b'"),
    (lambda d: (d / "manifests" / "x.yaml").write_text(CM.format(name="a", ns="Kube-System")),
     "document 1.metadata.namespace", "'Kube-System'"),
    (lambda d: ((d / "manifests" / "a.yaml").write_text(CM.format(name="a", ns="default")),
                (d / "manifests" / "b.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n")),
     "document 1", "ConfigMap default/a again (first in manifests/a.yaml document 1)"),
    (lambda d: (d / "manifests" / "x.yaml").write_text(CM.format(name="kdrill-platform", ns="kube-system")),
     "document 1", "that ConfigMap"),
    (lambda d: (d / "manifests" / "lol.yaml").write_text(LAUGHS), "document 1", "excessive aliasing"),
    (lambda d: (d / "manifests" / "x.yaml").write_text(CM.format(name="a", ns="0")), "document 1.metadata.namespace",
     "0"),
    # Counted, the braces balance; read as CoreDNS reads them, the first '}' closes nothing.
    (lambda d: (d / "coredns" / "Corefile").write_text("} .:53 {\n  errors\n"), "content",
     "'}' without a block"),
    (lambda d: (d / "coredns" / "Corefile").write_text(".:53 {\n" + "  # padding\n" * 100_000 + "}\n"), "size",
     "1200009 bytes"),
    (lambda d: (d / "kubeadm" / "v4.yaml").write_text("apiVersion: kubeadm.k8s.io/v1beta4\n"
                                                      "kind: ClusterConfiguration\n"),
     "apiVersion", "'kubeadm.k8s.io/v1beta4'"),
    (lambda d: (d / "kubeadm" / "big.yaml").write_text("kind: KubeletConfiguration\n" + "# pad\n" * 12_000), "size",
     "bytes"),
    (lambda d: ((d / "images").mkdir(), (d / "images" / "app.tar").write_bytes(b"")), "content", "not a tar archive"),
    (lambda d: ((d / "images").mkdir(), tar_of(d / "images" / "app.tar", {"layer.tar": b"x"})), "content",
     "without either"),
    (lambda d: (d / "kubeadm" / "lol.yaml").write_text("kind: KubeletConfiguration\nx:\n" + LAUGHS.split("data:\n")[1]),
     "content", "excessive aliasing"),
    # kubectl applies a list's items: a forged record, a duplicate, a bad namespace went by unchecked.
    (lambda d: (d / "manifests" / "x.yaml").write_text(
        "apiVersion: v1\nkind: List\nitems:\n- " + CM.format(name="kdrill-platform", ns="kube-system").replace(
            "\n", "\n  ")), "document 1", "kind List with items"),
    (lambda d: (d / "manifests" / "x.yaml").write_text("apiVersion: v1\nkind: ConfigMapList\nmetadata: {}\nitems: []\n"),
     "document 1", "kind ConfigMapList with items"),
    # A second name silently won; a key that is not a string made the unknown-key check's sort raise TypeError.
    (lambda d: (d / "platform.yaml").write_text("name: x\ndescription: d\nname: y\n"), "content",
     "duplicate key 'name' (first at line 1) at line 3"),
    (lambda d: (d / "platform.yaml").write_text("name: x\ndescription: d\n1: a\n"), "content",
     "a key must be a string, got 1"),
    (lambda d: (d / "platform.yaml").write_text("name: x\ndescription: d\n~: a\n"), "content",
     "a key must be a string, got None"),
    # A name of bytes that are not UTF-8 crashed the hash with UnicodeEncodeError.
    (lambda d: (d / "files" / os.fsdecode(b"x\xff")).write_text("x"), "file name", "b'x\\xff'"),
    (lambda d: (d / "manifests" / os.fsdecode(b"x\xff.yaml")).write_text(CM.format(name="x", ns="default")),
     "file name", "b'x\\xff.yaml'"),
    # PyYAML raised ValueError (a traceback) for an integer of more digits than Python converts.
    (lambda d: (d / "manifests" / "x.yaml").write_text(CM.format(name="a", ns="default") + "x: " + "1" * 5000 + "\n"),
     "content", "digits"),
])
def test_bad_profiles_are_refused_with_file_field_expected_and_got(profile_dir, change, where, got):
    change(profile_dir)
    with pytest.raises(ProfileError) as caught:
        load(profile_dir)
    assert caught.value.where == where, str(caught.value)
    assert got in caught.value.got, str(caught.value)
    assert str(profile_dir) in caught.value.path and "expected" in str(caught.value)


@pytest.mark.parametrize("levels, width", [(5, 10), (6, 10), (4, 10_000)])
@pytest.mark.parametrize("relative, text", [
    ("platform.yaml", "name: x\ndescription: {bomb}\n"),
    ("platform.yaml", "name: x\ndescription: d\nprepare: {{command: echo, files: [{bomb}]}}\n"),
    ("platform.yaml", "name: x\ndescription: d\nwebhook_tls: {{service: {bomb}, namespace: x}}\n"),
    ("manifests/x.yaml", "apiVersion: v1\nkind: {bomb}\nmetadata: {{name: a}}\n"),
    ("manifests/x.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: a, namespace: {bomb}}}\n"),
    ("kubeadm/x.yaml", "kind: {bomb}\n"),
])
def test_a_refusal_never_shows_a_value_whole(profile_dir, relative, text, levels, width):
    # A value was shown whole before its expansion was checked: a 300-byte file made a message of
    # megabytes (each level ten times more). Now the expansion is checked first, and what a
    # refusal shows of a value is cut short.
    (profile_dir / relative).write_text(text.format(bomb=nested_aliases(levels, width)))
    with pytest.raises(ProfileError) as caught:
        load(profile_dir)
    assert len(str(caught.value)) < 1000, str(caught.value)[:1000]
    if (levels, width) != (5, 10):  # 10**6 strings, or 10**7: more than the limit, said as such
        assert "aliases expanding" in caught.value.expected, str(caught.value)
    else:  # about 120,000 nodes: read, and shown cut short
        assert caught.value.got.endswith(" characters)"), str(caught.value)


def test_dates_are_read_as_the_strings_kubectl_and_kind_read(profile_dir):
    # PyYAML's YAML 1.1 timestamp rule made an impossible date a ValueError out of the loader (a
    # traceback), wherever it was: profile YAML is read as the scenario loader reads dates.
    (profile_dir / "platform.yaml").write_text("name: example\ndescription: 2001-13-40\n"
                                               "webhook_tls: {service: policy-webhook, namespace: platform-policy}\n")
    (profile_dir / "manifests" / "zz-dates.yaml").write_text(CM.format(name="dates", ns="default")
                                                             + "data: {when: 2001-13-40, valid: 2001-12-10}\n")
    (profile_dir / "kubeadm" / "zz-dates.yaml").write_text("kind: KubeletConfiguration\nx-when: 2001-13-40\n")
    profile = load(profile_dir)
    assert profile.description == "2001-13-40"
    assert "manifests/zz-dates.yaml" in profile.files and any("2001-13-40" in p for p in profile.kubeadm_patches)


def tar_of(path: Path, members: dict[str, bytes]) -> None:
    with tarfile.open(path, "w") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


def test_braces_in_corefile_comments_and_strings_are_not_blocks(profile_dir):
    # They were counted, so this Corefile CoreDNS reads fine was refused ("8 '{' and 6 '}'").
    corefile = profile_dir / "coredns" / "Corefile"
    corefile.write_text(corefile.read_text().replace(
        "    errors\n", '    errors { # a { in a comment\n        consolidate 5m ".* timeout{"\n    }\n'))
    assert "consolidate" in load(profile_dir).corefile


def test_image_archives_of_docker_save_and_oci_layout_load(profile_dir):
    (profile_dir / "images").mkdir()
    tar_of(profile_dir / "images" / "a.tar", {"manifest.json": b"[]", "blobs/sha256/x": b"x"})
    tar_of(profile_dir / "images" / "b.tar", {"./index.json": b"{}", "./oci-layout": b"{}"})
    assert [p.name for p in load(profile_dir).images] == ["a.tar", "b.tar"]


@pytest.mark.parametrize("compress, name", [(gzip.compress, "gzip"), (bz2.compress, "bzip2"), (lzma.compress, "xz")])
def test_a_damaged_compressed_image_archive_is_refused_as_damaged(profile_dir, tmp_path, compress, name):
    # A damaged xz archive raised LZMAError (a traceback); a damaged gzip one was "a tar archive
    # without either": its damage read as the archive's end, its checksum never checked.
    tar_of(tmp_path / "image.tar", {"manifest.json": b"[]", "layer.tar": bytes(range(256)) * 400})
    data = compress((tmp_path / "image.tar").read_bytes())
    (profile_dir / "images").mkdir()
    (profile_dir / "images" / "app.tar").write_bytes(data)
    assert [p.name for p in load(profile_dir).images] == ["app.tar"]
    (profile_dir / "images" / "app.tar").write_bytes(data[:len(data) // 2] + bytes([data[len(data) // 2] ^ 0xFF])
                                                     + data[len(data) // 2 + 1:])
    with pytest.raises(ProfileError) as caught:
        load(profile_dir)
    assert caught.value.path.endswith("app.tar") and caught.value.where == "content"
    assert caught.value.got.startswith(f"a damaged {name} archive ("), str(caught.value)


def test_a_profile_path_docker_would_split_is_refused(tmp_path):
    # kind hands Docker --volume=<host path>:<node path>:ro; a ':' in the host path broke
    # kind create cluster, after Docker was touched.
    target = tmp_path / "team:platform"
    shutil.copytree(EXAMPLE, target)
    with pytest.raises(ProfileError) as caught:
        load(target)
    assert caught.value.where == "path" and "team:platform" in caught.value.got, str(caught.value)
    shutil.rmtree(target / "files")
    (target / "kubeadm" / "apiserver-audit.yaml").unlink()  # no files/ mounted: nothing to split
    assert load(target).name == "example"


def test_a_profile_at_a_path_that_is_not_utf8_is_refused(tmp_path):
    # The kind config kdrill writes names the profile's path (UTF-8 text): it crashed there.
    target = tmp_path / os.fsdecode(b"team\xff") / "platform"
    shutil.copytree(EXAMPLE, target)
    with pytest.raises(ProfileError) as caught:
        load(target)
    assert caught.value.where == "path" and caught.value.got == repr(os.fsencode(target))


def test_a_missing_directory_is_refused(tmp_path):
    with pytest.raises(ProfileError, match="no such directory"):
        load(tmp_path / "nowhere")


def test_the_kind_config_carries_the_profile(profile_dir):
    profile = load(profile_dir)
    base = yaml.safe_load((resources.clusters_dir() / "ha.yaml").read_text())
    config = kind_config(profile, base)
    assert config["name"] == "kdrill-ha-example"
    assert config["kubeadmConfigPatches"][:len(base["kubeadmConfigPatches"])] == base["kubeadmConfigPatches"]
    assert config["kubeadmConfigPatches"][-1] == profile.kubeadm_patches[0]
    for node in config["nodes"]:
        assert {"hostPath": str(profile_dir.resolve() / "files"), "containerPath": NODE_FILES_DIR,
                "readOnly": True} in node["extraMounts"]
    assert "extraMounts" not in base["nodes"][0]  # the base is not changed


def test_files_are_mounted_on_the_node_kind_makes_of_a_config_listing_none(profile_dir):
    # kind gives such a config one control-plane node; files/ was mounted on none, so the audit
    # patch named a policy file the node did not have.
    config = kind_config(load(profile_dir), {"kind": "Cluster", "apiVersion": "kind.x-k8s.io/v1alpha4", "name": "k"})
    assert config["nodes"] == [{"role": "control-plane", "extraMounts": [
        {"hostPath": str(profile_dir.resolve() / "files"), "containerPath": NODE_FILES_DIR, "readOnly": True}]}]


def test_a_cluster_of_another_version_of_the_profile_is_refused(profile_dir):
    profile = load(profile_dir)
    assert mismatch(profile, profile.record(), "kdrill-ha-example") is None
    assert "no complete installation" in mismatch(profile, None, "kdrill-ha-example")
    (profile_dir / "coredns" / "Corefile").write_text(profile.corefile.replace("cache 30", "cache 5"))
    changed = load(profile_dir)
    why = mismatch(changed, profile.record(), "kdrill-ha-example")
    assert "changed: coredns/Corefile" in why and "kdrill cluster delete --platform" in why


def test_hidden_entries_are_ignored_and_not_hashed(profile_dir):
    before = load(profile_dir).hash
    (profile_dir / ".git").mkdir()
    (profile_dir / "manifests" / ".configmap-policy.yaml.swp").write_text("x")
    assert load(profile_dir).hash == before


def test_kdrill_refuses_a_bad_profile_before_touching_docker(tmp_path):
    profile = tmp_path / "profile"
    profile.mkdir()
    (profile / "platform.yaml").write_text("name: ok\n")
    for command in (["cluster", "create", "--platform", str(profile)], ["run", "--platform", str(profile)]):
        # No docker on PATH: had kdrill reached for Docker first, it would say so instead.
        result = subprocess.run([sys.executable, "-m", "harness.cli", "--reports", str(tmp_path / "r"), *command],
                                capture_output=True, text=True, timeout=60, env={"PATH": "/nonexistent", "HOME":
                                                                                 str(tmp_path)})
        assert result.returncode != 0
        assert "platform profile" in result.stderr and "description" in result.stderr, result.stderr
        assert "Docker" not in result.stderr, result.stderr


def test_a_symlinked_directory_is_hashed_by_what_it_holds(profile_dir, tmp_path):
    # kdrill reads manifests through the link, so the hash must follow it too: it once skipped
    # a symlinked manifests/ whole, and an edit there left the hash (the cluster's identity) as it was.
    elsewhere = tmp_path / "elsewhere"
    shutil.move(profile_dir / "manifests", elsewhere)
    (profile_dir / "manifests").symlink_to(elsewhere)
    profile = load(profile_dir)
    assert "manifests/configmap-policy.yaml" in profile.files
    with (elsewhere / "configmap-policy.yaml").open("a") as f:
        f.write("# edited where the link points\n")
    assert load(profile_dir).hash != profile.hash


def test_files_reach_the_nodes_whole_so_the_hash_covers_what_they_see(profile_dir):
    # files/ is mounted as it is: a hidden file, an empty directory (hostPath type Directory) and
    # the executable bit are on every node, so each is part of the cluster's identity.
    hashes = [load(profile_dir).hash]
    (profile_dir / "files" / ".encryption.yaml").write_text("x")
    hashes.append(load(profile_dir).hash)
    (profile_dir / "files" / "certs").mkdir()
    hashes.append(load(profile_dir).hash)
    assert "files/certs/" in load(profile_dir).files
    (profile_dir / "files" / "audit-policy.yaml").chmod(0o755)
    hashes.append(load(profile_dir).hash)
    assert len(set(hashes)) == len(hashes), hashes
    (profile_dir / "files" / "audit-policy.yaml").chmod(0o600)  # not executable: as before
    assert load(profile_dir).hash == hashes[-2]
    (profile_dir / "files" / "same.yaml").symlink_to("audit-policy.yaml")  # inside files/: the nodes see it too
    assert "files/same.yaml" in load(profile_dir).files


@pytest.mark.parametrize("change, where, got", [
    (lambda d, out: (d / "files" / "s.yaml").symlink_to(out), "symlink", "a link to "),
    (lambda d, out: (d / "files" / "r.yaml").symlink_to(Path("..") / ".." / out.name), "symlink", "'../../outside'"),
    (lambda d, out: (d / "files" / "sub").symlink_to(out.parent), "symlink", "a link to"),
    (lambda d, out: (d / "files" / "loop").symlink_to("loop"), "file", "resolves nowhere"),
    (lambda d, out: (d / "files" / "up").symlink_to(".."), "symlink", "'..'"),
    (lambda d, out: os.mkfifo(d / "files" / "fifo"), "file", "FIFO"),
])
def test_what_the_nodes_would_see_otherwise_than_hashed_is_refused(profile_dir, tmp_path, change, where, got):
    # The hash read the link's target on this host; the node sees the link, pointing elsewhere
    # or nowhere there. Such entries were hashed as the host's file or skipped silently.
    outside = tmp_path / "outside"
    outside.write_text("a: 1\n")
    change(profile_dir, outside)
    with pytest.raises(ProfileError) as caught:
        load(profile_dir)
    assert caught.value.where == where, str(caught.value)
    assert got in caught.value.got, str(caught.value)


def test_an_unreadable_file_is_refused_by_name(profile_dir, monkeypatch):
    # As root (CI) chmod 000 reads anyway: the error a non-root user gets, made here. It was a
    # PermissionError traceback.
    unreadable = profile_dir / "files" / "audit-policy.yaml"
    real_open = Path.open

    def refusing_open(self, *args, **kwargs):
        if self == unreadable:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", refusing_open)
    with pytest.raises(ProfileError) as caught:
        load(profile_dir)
    assert caught.value.path == str(unreadable) and "Permission denied" in caught.value.got, str(caught.value)


def test_the_pytest_plugin_refuses_a_bad_profile_before_touching_docker(tmp_path):
    # It asked Docker first and built the kind images (minutes when cold), then read the profile.
    profile = tmp_path / "profile"
    profile.mkdir()
    (profile / "platform.yaml").write_text("name: ok\n")
    drill = resources.data_root() / "drills" / "test_api_overload.py"
    result = subprocess.run([sys.executable, "-m", "pytest", str(drill), "-p", "no:cacheprovider", "-q",
                             f"--kdrill-platform={profile}", f"--kdrill-reports={tmp_path / 'r'}"],
                            capture_output=True, text=True, timeout=120, cwd=resources.data_root(),
                            env={"PATH": "/nonexistent", "HOME": str(tmp_path)})
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "platform profile" in output and "description" in output, output[-2000:]
    assert "Docker" not in output, output[-2000:]


def test_node_roles_are_read_after_the_cluster_name(tmp_path):
    # A profile named control-plane makes the cluster kdrill-ha-control-plane: its workers were
    # taken for control-plane nodes, since every node name held "-control-plane".
    from harness.kube.providers.kind import KindProvider

    provider = object.__new__(KindProvider)
    provider.name = "kdrill-ha-control-plane"
    suffixes = ["control-plane", "control-plane2", "worker", "worker2", "external-load-balancer"]
    provider.nodes = lambda: [f"{provider.name}-{s}" for s in suffixes]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("")
    roles = provider.cluster(kubeconfig).nodes_by_role
    named = {s: f"{provider.name}-{s}" for s in suffixes}
    assert roles == {"control-plane": [named["control-plane"], named["control-plane2"]],
                     "worker": [named["worker"], named["worker2"]],
                     "load-balancer": [named["external-load-balancer"]]}


def test_a_profile_naming_another_configs_cluster_is_refused_before_docker(tmp_path):
    # single.yaml's cluster is kdrill: a profile named ha made kdrill-ha, ha.yaml's plain cluster.
    # That one, existing, was called a failed installation of the profile and its delete offered.
    from harness.platform.profile import check_cluster_name

    profile_dir = tmp_path / "profile"
    shutil.copytree(EXAMPLE, profile_dir)
    (profile_dir / "platform.yaml").write_text("name: ha\ndescription: a profile named like a config\n"
                                              "webhook_tls: {service: policy-webhook, namespace: platform-policy}\n")
    profile = load(profile_dir)
    with pytest.raises(ProfileError) as caught:
        check_cluster_name(profile, "single")
    assert caught.value.where == "name" and "kdrill-ha" in caught.value.got and "ha.yaml" in caught.value.got
    assert check_cluster_name(profile, "ha") == "kdrill-ha-ha"
    result = subprocess.run([sys.executable, "-m", "harness.cli", "cluster", "create", "--config", "single",
                             "--platform", str(profile_dir)], capture_output=True, text=True, timeout=60,
                            env={"PATH": "/nonexistent", "HOME": str(tmp_path)})
    assert result.returncode != 0 and "kdrill-ha" in result.stderr and "Docker" not in result.stderr, result.stderr


class _ConfigMaps:
    """A cluster's core API with one kube-system/kdrill-platform ConfigMap holding ``data``."""

    def __init__(self, data):
        self.data, self.created = data, []

    def read_namespaced_config_map(self, name, namespace, **_):
        return types.SimpleNamespace(data=self.data)

    def create_namespaced_config_map(self, namespace, body, **_):
        self.created.append(body)


@pytest.mark.parametrize("data, note", [
    ({}, "without a profile record"),
    ({"profile": "{not json"}, "not JSON"),
    ({"profile": "[]"}, "a JSON array"),
    ({"profile": "null"}, "a JSON null"),
    ({"profile": json.dumps({"name": "example", "hash": "abc", "files": {}})}, "not a name and a SHA-256"),
    ({"profile": json.dumps({"name": "example", "hash": "0" * 64, "files": []})}, "no map of files"),
])
def test_a_record_kdrill_did_not_write_is_said_to_be_so(profile_dir, data, note):
    # "null" or no key read as no record at all ("no kube-system/kdrill-platform"), a list
    # crashed mismatch() (AttributeError), and "not JSON" was listed as every file changed.
    profile = load(profile_dir)
    record = recorded(types.SimpleNamespace(core=_ConfigMaps(data)))
    assert record["hash"] is None and note in record["note"], record
    why = mismatch(profile, record, "kdrill-ha-example")
    assert "cannot be told" in why and note in why and "changed:" not in why, why


def test_a_record_whose_hash_is_not_that_of_its_files_is_refused_as_forged(profile_dir):
    # A record with this profile's hash but another file list (edited by hand) was taken as
    # this profile's; a hash is only believed when it is its own files' hash.
    profile = load(profile_dir)
    forged = {**profile.record(), "files": {"platform.yaml": "0" * 64}}
    record = recorded(types.SimpleNamespace(core=_ConfigMaps({"profile": json.dumps(forged)})))
    assert record["hash"] is None and "not the hash of its own file list" in record["note"]
    assert mismatch(profile, record, "kdrill-ha-example") is not None
    genuine = recorded(types.SimpleNamespace(core=_ConfigMaps({"profile": json.dumps(profile.record())})))
    assert genuine == profile.record() and mismatch(profile, genuine, "kdrill-ha-example") is None


def test_a_profile_changed_during_its_installation_is_not_recorded(profile_dir):
    # The record was written from the hash read before the install, whatever the manifests
    # applied (read again meanwhile) and files/ (mounted live) then held.
    from harness.kube.providers import ProviderError
    from harness.platform.profile import install

    profile = load(profile_dir)
    core = _ConfigMaps({})
    editing = [True]

    def node_exec(node, command, stdin=None, **_):
        if "apply" in command and editing[0]:
            with (profile_dir / "manifests" / "configmap-policy.yaml").open("a") as f:
                f.write("# edited while being applied\n")
        return subprocess.CompletedProcess(command, 0, "", "")

    cluster = types.SimpleNamespace(nodes_by_role={"control-plane": ["n"]}, node_exec=node_exec, core=core,
                                    apps=types.SimpleNamespace(patch_namespaced_deployment=lambda *a, **k: None))
    core.patch_namespaced_config_map = lambda *a, **k: None
    with pytest.raises(ProviderError, match="changed during the installation"):
        install(profile, cluster, types.SimpleNamespace(name="kdrill-ha-example"))
    assert core.created == []
    editing[0] = False  # left alone meanwhile: recorded, as it was read
    install(load(profile_dir), cluster, types.SimpleNamespace(name="kdrill-ha-example"))
    assert [json.loads(c.data["profile"])["hash"] for c in core.created] == [load(profile_dir).hash]


def test_the_report_says_whether_the_record_was_checked_against_a_directory(profile_dir):
    # A run through a kubeconfig carries the cluster's record unchecked: the report showed it as
    # the platform all the same.
    from harness.evidence.report import _Run, _run_view

    profile = load(profile_dir)
    unchecked = _run_view(_Run(run_dir=profile_dir, meta={"platform": profile.record()}, records=[]))["platform"]
    assert f"sha256 {profile.hash}" in unchecked and "not checked against a profile directory" in unchecked
    checked = _run_view(_Run(run_dir=profile_dir, meta={"platform": profile.record(),
                                                        "platform_checked_against": str(profile_dir)}, records=[]))
    assert f"matching {profile_dir}" in checked["platform"]


def test_webhook_tls_fills_the_three_placeholders_and_leaves_kubernetes_own(profile_dir):
    from harness.components.webhook import generate_webhook_tls
    from harness.platform.profile import manifest_text

    path = profile_dir / "manifests" / "policy-webhook.yaml"
    with path.open("a") as f:  # a dependent environment variable: Kubernetes expands it, kdrill must not
        f.write("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: env, namespace: platform-policy}\n"
                "data: {arg: \"$(POD_NAME)\", own: \"$(pod_name)\", escaped: \"$$(tls_cert)\"}\n")
    profile = load(profile_dir)
    tls = generate_webhook_tls("policy-webhook", "platform-policy")
    docs = list(yaml.safe_load_all(manifest_text(profile, path, tls)))
    secret = next(d for d in docs if d["kind"] == "Secret")
    config = next(d for d in docs if d["kind"] == "ValidatingWebhookConfiguration")
    assert secret["stringData"] == {"tls.crt": tls.cert_pem.decode(), "tls.key": tls.key_pem.decode()}
    assert config["webhooks"][0]["clientConfig"]["caBundle"] == tls.ca_bundle
    assert next(d for d in docs if d.get("metadata", {}).get("name") == "env")["data"] == {
        "arg": "$(POD_NAME)", "own": "$(pod_name)", "escaped": "$(tls_cert)"}  # $$( escapes, as in scenarios
    # A manifest without the placeholders goes to kubectl as written.
    plain = profile_dir / "manifests" / "configmap-policy.yaml"
    assert manifest_text(profile, plain, tls) == plain.read_text()


def _refused_webhook_tls(profile_dir, value) -> ProfileError:
    meta = yaml.safe_load((profile_dir / "platform.yaml").read_text())
    meta["webhook_tls"] = value
    (profile_dir / "platform.yaml").write_text(yaml.safe_dump(meta))
    with pytest.raises(ProfileError) as caught:
        load(profile_dir)
    return caught.value


@pytest.mark.parametrize("value, where", [
    ("policy-webhook", "webhook_tls"),
    ({"service": "policy-webhook"}, "webhook_tls"),
    ({"service": "Policy_Webhook", "namespace": "platform-policy"}, "webhook_tls.service"),
    ({"service": "policy-webhook", "namespace": "", "extra": 1}, "webhook_tls"),
])
def test_a_malformed_webhook_tls_is_refused(profile_dir, value, where):
    error = _refused_webhook_tls(profile_dir, value)
    assert error.where == where and "platform.yaml" in error.path


def test_tls_placeholders_without_webhook_tls_are_refused(profile_dir):
    meta = yaml.safe_load((profile_dir / "platform.yaml").read_text())
    del meta["webhook_tls"]
    (profile_dir / "platform.yaml").write_text(yaml.safe_dump(meta))
    with pytest.raises(ProfileError) as caught:
        load(profile_dir)
    assert caught.value.path.endswith("policy-webhook.yaml")
    assert "$(tls_cert)" in caught.value.got and "webhook_tls" in caught.value.expected  # the Secret, first


@pytest.mark.parametrize("extra, where, got", [
    # A mapping key is not replaced: it would reach the cluster as "$(tls_cert)".
    ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: k, namespace: platform-policy}\ndata: {\"$(tls_cert)\": x}\n",
     "document 1", "'$(tls_cert)'"),
    # The private key in a ConfigMap is readable by whoever reads ConfigMaps.
    ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: k, namespace: platform-policy}\ndata: {key: \"$(tls_key)\"}\n",
     "document 1", "$(tls_key) in a ConfigMap"),
    # data holds base64: the PEM text would be refused by the API once the cluster is up.
    ("apiVersion: v1\nkind: Secret\nmetadata: {name: k, namespace: platform-policy}\ndata: {tls.crt: \"$(tls_cert)\"}\n",
     "document 1.data", "$(tls_cert) in data"),
])
def test_tls_placeholders_where_they_would_not_work_are_refused(profile_dir, extra, where, got):
    (profile_dir / "manifests" / "zz-extra.yaml").write_text(extra)
    with pytest.raises(ProfileError) as caught:
        load(profile_dir)
    assert caught.value.path.endswith("zz-extra.yaml") and caught.value.where == where and caught.value.got == got


def test_the_ca_bundle_in_a_secrets_data_is_base64_and_allowed(profile_dir):
    (profile_dir / "manifests" / "zz-extra.yaml").write_text(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: k, namespace: platform-policy}\ndata: {ca.crt: \"$(tls_ca_bundle)\"}\n")
    assert profile_dir / "manifests" / "zz-extra.yaml" in load(profile_dir).manifests


@pytest.mark.parametrize("relative", ["kubeadm/apiserver-audit.yaml", "coredns/Corefile"])
def test_tls_placeholders_outside_manifests_are_refused(profile_dir, relative):
    # Only manifests are filled in: elsewhere the placeholder would reach the cluster as written.
    path = profile_dir / relative
    path.write_text(path.read_text() + "\n# $(tls_ca_bundle)\n")
    with pytest.raises(ProfileError) as caught:
        load(profile_dir)
    assert caught.value.path == str(path) and caught.value.got == "$(tls_ca_bundle)"


@pytest.mark.parametrize("value, expected", [
    ({"service": "1-webhook", "namespace": "platform-policy"}, "starting with a letter"),  # a DNS label, no Service name
    ({"service": "other-webhook", "namespace": "platform-policy"}, "platform-policy/policy-webhook"),  # made by no manifest
    ({"service": "policy-webhook", "namespace": "default"}, "platform-policy/policy-webhook"),
])
def test_webhook_tls_must_name_a_service_the_manifests_make(profile_dir, value, expected):
    error = _refused_webhook_tls(profile_dir, value)
    assert error.where.startswith("webhook_tls") and expected in error.expected


PROMETHEUS_SAYS, ALERTMANAGER_SAYS = "NodePort (30000 to 32767)", "<namespace>/<name>"


@pytest.mark.parametrize("key, value, says", [
    *[("prometheus", v, PROMETHEUS_SAYS) for v in (30090, {"node_port": 80}, {"node_port": "30090"},
                                                   {"node_port": True}, {"node_port": 30090, "path": "/"}, {})],
    *[("alertmanager", v, ALERTMANAGER_SAYS) for v in (
        {"service": "monitoring", "port": 9093}, {"service": "a/b/c", "port": 9093},
        {"service": "monitoring/Alertmanager", "port": 9093}, {"service": "monitoring/alertmanager", "port": 0},
        {"service": "monitoring/alertmanager", "port": True}, {"service": "monitoring/alertmanager"},
        "monitoring/alertmanager:9093")],
])
def test_a_malformed_prometheus_or_alertmanager_is_refused(profile_dir, key, value, says):
    meta = yaml.safe_load((profile_dir / "platform.yaml").read_text())
    meta[key] = value
    (profile_dir / "platform.yaml").write_text(yaml.safe_dump(meta))
    with pytest.raises(ProfileError) as caught:
        load(profile_dir)
    assert caught.value.where == key and says in str(caught.value)


def test_the_observability_profile_names_its_prometheus_and_its_rules_parse():
    root = EXAMPLE.parent / "observability"
    meta = yaml.safe_load((root / "platform.yaml").read_text())
    assert meta["prometheus"] == {"node_port": 30090}
    stack = list(yaml.safe_load_all((root / "manifests" / "30-stack.yaml").read_text()))
    service = next(d for d in stack if d["kind"] == "Service" and d["metadata"]["name"] == "prometheus")
    assert service["spec"]["ports"][0]["nodePort"] == 30090
    # Its Alertmanager, watched through the API server: the Service and port the profile makes.
    namespace, name = meta["alertmanager"]["service"].split("/")
    manager = next(d for d in stack if d["kind"] == "Service" and d["metadata"]["name"] == name)
    assert manager["metadata"]["namespace"] == namespace
    assert manager["spec"]["ports"][0]["port"] == meta["alertmanager"]["port"]
    rules = next(yaml.safe_load_all((root / "manifests" / "21-prometheus-rules.yaml").read_text()))
    names = [r["alert"] for text in rules["data"].values() for g in yaml.safe_load(text)["groups"] for r in g["rules"]]
    assert len(names) == len(set(names)) and "EtcdMemberDown" in names
    # Every alert a catalogue scenario expects is one of the profile's rules (else it reads undetected).
    from harness.spec.scenario import load_scenarios
    expected = {d.alert for s in load_scenarios(resources.scenarios_dir()) for d in s.detection}
    assert expected and expected <= set(names), expected - set(names)


def test_rbac_and_custom_kinds_keep_the_names_their_api_servers_take(profile_dir):
    """Names are checked per built-in kind: an RBAC name is a path segment (``system:...``) and a
    custom kind's name is its own API server's, so neither is refused for a colon or a capital."""
    (profile_dir / "manifests" / "rbac.yaml").write_text(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: 'system:kdrill-reader'}\n"
        "---\napiVersion: example.com/v1\nkind: ConfigMap\nmetadata: {name: Not_A_Core_ConfigMap, namespace: default}\n")
    assert load(profile_dir).manifests[-1].name == "rbac.yaml"
