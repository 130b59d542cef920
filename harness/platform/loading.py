"""Checking a platform profile directory part by part, as :func:`harness.platform.profile.load`
reads it: its entries, platform.yaml (name, description, webhook_tls, prepare, prometheus, alertmanager), kubeadm/,
manifests/, coredns/, images/ and files/. Each step raises ProfileError (file, field, expected,
got) for the first thing the layout (harness/platform/profile.py) does not allow; none reads a
cluster."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from harness.platform.reading import (
    PROFILE_FILE,
    ProfileError,
    archive_problem,
    clip,
    corefile_problem,
    read_text,
    refuse_alias_bombs,
    refuse_non_utf8,
    refuse_tls_placeholders,
    tls_misplaced,
    tls_placeholders,
    visible_entries,
    what_is,
    yaml_documents,
)
from harness.platform.record import RECORD_NAME, RECORD_NAMESPACE
from harness.spec.manifests import KINDS, name_problem
from harness.spec.scenario import UniqueKeyLoader

# What kind v0.31 writes for Kubernetes 1.23 and later (pkg/cluster/internal/kubeadm/config.go). kind
# patches a document of the patch's kind and, when the patch names one, of its apiVersion only
# (pkg/internal/patch/resource.go): a patch for another version is dropped without a word.
KUBEADM_API_VERSIONS = {"ClusterConfiguration": "kubeadm.k8s.io/v1beta3", "InitConfiguration": "kubeadm.k8s.io/v1beta3",
                        "JoinConfiguration": "kubeadm.k8s.io/v1beta3",
                        "KubeletConfiguration": "kubelet.config.k8s.io/v1beta1",
                        "KubeProxyConfiguration": "kubeproxy.config.k8s.io/v1alpha1"}
KUBEADM_KINDS = tuple(KUBEADM_API_VERSIONS)
# kind splits each patch into documents with a bufio.Scanner of its default 64 KiB buffer.
KUBEADM_PATCH_MAX_BYTES = 60 * 1024
COREFILE_MAX_BYTES = 1 << 20  # a ConfigMap's data holds at most 1 MiB
ALLOWED_ENTRIES = {PROFILE_FILE: "file", "README.md": "file", "kubeadm": "dir", "files": "dir", "manifests": "dir",
                   "coredns": "dir", "images": "dir"}
NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,18}[a-z0-9])?")  # fullmatch: "$" would let a final newline in
NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # metadata.namespace: a DNS label, whatever the kind
SERVICE = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")  # a Service's name: an RFC 1035 label, starting with a letter


def check_root(directory: str | Path) -> Path:
    """``directory`` resolved, checked to be a profile's: a directory of a UTF-8 path holding only
    the entries the layout names (hidden ones aside). Raises ProfileError."""
    root = Path(directory).expanduser().resolve()
    if not root.is_dir():
        raise ProfileError(root, "--platform", "a directory holding platform.yaml (see `kdrill cluster create --help`)",
                           "no such directory" if not root.exists() else "a file")
    refuse_non_utf8(root, whole=True)  # written into the kind config kdrill makes of it
    for entry in sorted(root.iterdir()):
        if entry.name.startswith("."):
            continue
        kind = ALLOWED_ENTRIES.get(entry.name)
        if kind is None or (kind == "dir") != entry.is_dir():
            allowed = ", ".join(f"{n}/" if k == "dir" else n for n, k in ALLOWED_ENTRIES.items())
            raise ProfileError(entry, "entry", f"only {allowed}", what_is(entry))
    return root


def read_meta(root: Path) -> dict[str, Any]:
    """platform.yaml's one mapping, its keys checked to be name, description, webhook_tls, prepare
    and prometheus (each checked by the steps below). Raises ProfileError."""
    meta_path = root / PROFILE_FILE
    if not meta_path.is_file():
        raise ProfileError(meta_path, "file", "platform.yaml with name and description", "no such file")
    # kdrill's own file, read as scenarios are: a second `name:` would silently win, and a key
    # that is not a string (`1:`, `~:`) names no field.
    docs = yaml_documents(meta_path, loader=UniqueKeyLoader)
    refuse_alias_bombs(meta_path, docs)
    meta = docs[0] if len(docs) == 1 else None
    if not isinstance(meta, dict):
        raise ProfileError(meta_path, "content", "one mapping with name and description", f"{len(docs)} documents"
                           if len(docs) != 1 else type(meta).__name__)
    unknown = sorted(set(meta) - {"name", "description", "webhook_tls", "prepare", "prometheus", "alertmanager"})
    if unknown:
        raise ProfileError(meta_path, unknown[0], "only name, description, webhook_tls, prepare, prometheus and alertmanager",
                           repr(unknown[0]))
    return meta


def check_webhook_tls(meta_path: Path, webhook_tls: Any) -> None:
    """platform.yaml's ``webhook_tls``: none, or a Service's name and namespace. Raises ProfileError."""
    if webhook_tls is None:
        return
    if not isinstance(webhook_tls, dict) or set(webhook_tls) != {"service", "namespace"}:
        raise ProfileError(meta_path, "webhook_tls", "a mapping with service and namespace (the webhook's "
                           "Service, whose serving certificate is made when the profile is installed)",
                           repr(webhook_tls))
    for key, pattern, what in (("service", SERVICE, "a Service name: a DNS label starting with a letter"),
                               ("namespace", NAMESPACE, "a namespace name: a DNS label")):
        if not isinstance(webhook_tls[key], str) or not pattern.fullmatch(webhook_tls[key]):
            raise ProfileError(meta_path, f"webhook_tls.{key}", f"{what} of at most 63 characters (a-z, 0-9, -)",
                               repr(webhook_tls[key]))


def check_prometheus(meta_path: Path, prometheus: Any) -> int | None:
    """platform.yaml's ``prometheus: {node_port}``: the NodePort (30000 to 32767) of the profile's
    own Prometheus, where drills read detection unless ``--prometheus`` names another; None when
    absent. Raises ProfileError."""
    if prometheus is None:
        return None
    port = prometheus.get("node_port") if isinstance(prometheus, dict) and set(prometheus) == {"node_port"} else None
    if isinstance(port, bool) or not isinstance(port, int) or not 30000 <= port <= 32767:
        raise ProfileError(meta_path, "prometheus", "a mapping {node_port: N}, N the NodePort (30000 to 32767) of the "
                           "profile's Prometheus", repr(prometheus))
    return port


def check_alertmanager(meta_path: Path, alertmanager: Any) -> tuple[str, str, int] | None:
    """platform.yaml's ``alertmanager: {service: <namespace>/<name>, port: N}``: the Service of the
    profile's own Alertmanager, watched during drills through the API server's service proxy
    unless ``--alertmanager`` names another; (namespace, name, port), or None when absent. Raises
    ProfileError."""
    if alertmanager is None:
        return None
    ok = isinstance(alertmanager, dict) and set(alertmanager) == {"service", "port"}
    service = alertmanager.get("service") if ok else None
    port = alertmanager.get("port") if ok else None
    parts = service.split("/") if isinstance(service, str) else []
    if (len(parts) != 2 or not NAMESPACE.fullmatch(parts[0]) or not SERVICE.fullmatch(parts[1]) or isinstance(port, bool)
            or not isinstance(port, int) or not 1 <= port <= 65535):
        raise ProfileError(meta_path, "alertmanager", "a mapping {service: <namespace>/<name>, port: N}: the Service "
                           "of the profile's Alertmanager and its port (1 to 65535)", repr(alertmanager))
    return parts[0], parts[1], port


def check_name_and_description(meta_path: Path, name: Any, description: Any) -> None:
    """platform.yaml's ``name`` (a DNS label of at most 20 characters) and ``description`` (not
    empty). Raises ProfileError."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ProfileError(meta_path, "name", "a DNS label of at most 20 characters (a-z, 0-9, -), part of the "
                           "cluster's name", repr(name))
    if not isinstance(description, str) or not description.strip():
        raise ProfileError(meta_path, "description", "a non-empty string: what this platform is", repr(description))

# Where a prepared file may be, as the loader reads each part: (pattern of its relative path, what).
PREPARED_PLACES = (
    (re.compile(r"manifests/[^/.][^/]*\.ya?ml"), "manifests/NAME.yaml"),
    (re.compile(r"images/[^/.][^/]*\.tar"), "images/NAME.tar"),
    (re.compile(r"kubeadm/[^/.][^/]*\.ya?ml"), "kubeadm/NAME.yaml"),
    (re.compile(r"coredns/Corefile"), "coredns/Corefile"),
    (re.compile(r"files/(?:[^/.][^/]*/)*[^/.][^/]*"), "files/PATH (no hidden names)"),
)


def check_prepared(root: Path, meta_path: Path, prepare: Any) -> None:
    """``prepare: {command, files}``: files a command outside the profile writes into it (built,
    not committed: an image archive, a manifest rendered from a published one), each where the
    loader reads that part (PREPARED_PLACES). Raises ProfileError naming the first bad or missing
    file and, for a missing one, the command that makes it."""
    if prepare is None:
        return
    if (not isinstance(prepare, dict) or set(prepare) != {"command", "files"}
            or not isinstance(prepare["command"], str) or not prepare["command"].strip()
            or not isinstance(prepare["files"], list) or not prepare["files"]):
        raise ProfileError(meta_path, "prepare", "a mapping with command (what to run, from the checkout) and files "
                           "(the paths in the profile it writes)", repr(prepare))
    places = ", ".join(what for _, what in PREPARED_PLACES)
    seen: set[str] = set()
    for rel in prepare["files"]:
        normal = Path(rel).as_posix() if isinstance(rel, str) and rel else None
        if normal is None or not any(pattern.fullmatch(normal) for pattern, _ in PREPARED_PLACES):
            raise ProfileError(meta_path, "prepare.files",
                               f"paths inside the profile where its parts are read: {places}", repr(rel))
        if normal in seen:
            raise ProfileError(meta_path, "prepare.files", "each path once", repr(rel))
        seen.add(normal)
    missing = [rel for rel in sorted(seen) if not (root / rel).is_file()]
    if missing:
        first = root / missing[0]
        got = "no such file" if not first.exists() and not first.is_symlink() else what_is(first)
        command, written = clip(prepare["command"].strip()), clip(", ".join(sorted(seen)))
        raise ProfileError(first, "file", f"a file that `{command}` writes: run it from the kdrill checkout first "
                           f"(platform.yaml prepare; it writes {written})",
                           got + (f"; also missing: {', '.join(missing[1:])}" if missing[1:] else ""))



def kubeadm_patches(root: Path) -> list[str]:
    """The text of each kubeadm/*.yaml, in name order (:func:`kubeadm_patch`). Raises ProfileError."""
    patches = []
    for path in visible_entries(root / "kubeadm"):
        if path.suffix not in (".yaml", ".yml") or not path.is_file():
            raise ProfileError(path, "file", "kubeadm/*.yaml files only", what_is(path))
        patches.append(kubeadm_patch(path))
    return patches


def kubeadm_patch(path: Path) -> str:
    """The text of kubeadm patch ``path``: one mapping of a kind kind patches, of the apiVersion
    kind writes if it names one, small enough for kind's reader, without TLS placeholders.
    Raises ProfileError."""
    docs = yaml_documents(path)
    refuse_alias_bombs(path, docs, "kind")
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise ProfileError(path, "content", "one YAML mapping (one kubeadm config patch per file)",
                           f"{len(docs)} documents" if len(docs) != 1 else f"a {type(docs[0]).__name__}")
    if docs[0].get("kind") not in KUBEADM_KINDS:
        raise ProfileError(path, "kind", " or ".join(KUBEADM_KINDS), repr(docs[0].get("kind")))
    api_version, want = docs[0].get("apiVersion"), KUBEADM_API_VERSIONS[docs[0]["kind"]]
    if api_version is not None and api_version != want:
        raise ProfileError(path, "apiVersion", f"{want} or none (what kind v0.31 writes: it skips a patch of "
                           "another version without a word)", repr(api_version))
    text = read_text(path)
    if len(text.encode()) > KUBEADM_PATCH_MAX_BYTES:
        raise ProfileError(path, "size", f"at most {KUBEADM_PATCH_MAX_BYTES // 1024} KiB (kind reads a patch "
                           "through a 64 KiB buffer)", f"{len(text.encode())} bytes")
    refuse_tls_placeholders(path, text)
    return text


# (API group, kind, namespace, name) of an object in manifests/ -> where it is first ("FILE document N").
Seen = dict[tuple[str, str, str, str], str]


def manifests(root: Path, webhook_tls: dict[str, str] | None) -> tuple[list[Path], Seen]:
    """The manifests/*.yaml files in name order, each holding at least one object
    (:func:`check_object`), and the objects they make. Raises ProfileError."""
    paths = []
    seen: Seen = {}
    for path in visible_entries(root / "manifests"):
        if path.suffix not in (".yaml", ".yml") or not path.is_file():
            raise ProfileError(path, "file", "manifests/*.yaml files only", what_is(path))
        objects = 0
        docs = yaml_documents(path, keep_empty=True)
        refuse_alias_bombs(path, docs, "kubectl", numbered=True)
        for i, doc in enumerate(docs):
            if doc is None:
                continue
            check_object(root, path, f"document {i + 1}", doc, seen, webhook_tls)
            objects += 1
        if not objects:  # kubectl apply refuses a file with no object: after the cluster is up
            raise ProfileError(path, "content", "at least one Kubernetes object", "none")
        paths.append(path)
    return paths, seen


def check_object(root: Path, path: Path, where: str, doc: Any, seen: Seen, webhook_tls: dict[str, str] | None) -> None:
    """Document ``where`` of manifest ``path``: one object with an apiVersion, a kind, a name and
    a namespace kubectl takes, not kdrill's record, not in ``seen`` (added to it), its TLS
    placeholders allowed and where they are replaced. Raises ProfileError."""
    if not isinstance(doc, dict):
        raise ProfileError(path, where, "a Kubernetes object (a mapping)", type(doc).__name__)
    for key in ("apiVersion", "kind"):
        if not isinstance(doc.get(key), str) or not doc[key]:
            raise ProfileError(path, f"{where}.{key}", "a string", repr(doc.get(key)))
    if doc["kind"] == "List" or "items" in doc:
        # kubectl takes a document with items for a list (kind List, ConfigMapList, ...) and
        # applies each item: none of them would pass through the checks below.
        raise ProfileError(path, where, "one object per document (a list's items would be applied unchecked)",
                           f"kind {doc['kind']}" + (" with items" if "items" in doc else ""))
    metadata = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    obj_name, namespace = metadata.get("name"), metadata.get("namespace")
    namespace = None if namespace == "" else namespace  # kubectl reads "" as none given
    # Every kind's name is one segment of its API path; the finer rules (DNS names for
    # most, ':' allowed in RBAC's) are the API server's, per kind.
    if (not isinstance(obj_name, str) or not obj_name or obj_name in (".", "..") or "/" in obj_name
            or "%" in obj_name):
        raise ProfileError(path, f"{where}.metadata.name", "a name (not '.' or '..', no '/' or '%')",
                           repr(obj_name))
    if namespace is not None and (not isinstance(namespace, str) or not NAMESPACE.fullmatch(namespace)):
        raise ProfileError(path, f"{where}.metadata.namespace", "a namespace name: a DNS label of at most 63 "
                           "characters (a-z, 0-9, -)", repr(namespace))
    check_builtin_name(path, where, doc["apiVersion"], doc["kind"], obj_name)
    # Without a namespace kubectl applies to default, as the rollout check reads it.
    key = (doc["apiVersion"].rpartition("/")[0], doc["kind"], namespace or "default", obj_name)
    if key == ("", "ConfigMap", RECORD_NAMESPACE, RECORD_NAME):
        raise ProfileError(path, where, f"any object but ConfigMap {RECORD_NAMESPACE}/{RECORD_NAME}, "
                           "kdrill's record of the installed profile", "that ConfigMap")
    if key in seen:
        # Applied in turn by one field manager, the later would silently replace the earlier.
        raise ProfileError(path, where, "each object once in manifests/",
                           f"{doc['kind']} {key[2]}/{obj_name} again (first in {seen[key]})")
    seen[key] = f"{path.relative_to(root)} {where}"
    used = tls_placeholders(doc)
    if used and webhook_tls is None:
        raise ProfileError(path, where, "$(tls_cert), $(tls_key) and $(tls_ca_bundle) only with webhook_tls "
                           "in platform.yaml (which says whose certificate they are)",
                           ", ".join(f"$({n})" for n in sorted(used)))
    misplaced = tls_misplaced(doc)
    if misplaced:
        raise ProfileError(path, where + misplaced[0], misplaced[1], misplaced[2])


def check_builtin_name(path: Path, where: str, api_version: str, kind: str, name: str) -> None:
    """A built-in kind's name as its API server validates it (harness.spec.manifests.KINDS: a DNS
    subdomain for most, a DNS label for a Namespace, an RFC 1035 label for a Service), so it is
    refused before the cluster is made rather than by the apply after it. RBAC names are path
    segments (``system:...``), and custom kinds are their API server's. Raises ProfileError."""
    known = KINDS.get(kind)
    if known is None or known.api_version.rpartition("/")[0] != api_version.rpartition("/")[0] \
            or known.api_version.startswith("rbac.authorization.k8s.io/"):
        return
    if (problem := name_problem(name, known.names)) is not None:
        raise ProfileError(path, f"{where}.metadata.name", f"a {kind} name: {problem}", repr(name))


def check_webhook_service(meta_path: Path, webhook_tls: dict[str, str] | None, seen: Seen) -> None:
    """With ``webhook_tls``, its Service must be one manifests/ makes (``seen``). Raises ProfileError."""
    if webhook_tls is not None and ("", "Service", webhook_tls["namespace"], webhook_tls["service"]) not in seen:
        # A certificate for a Service no manifest makes fits no webhook: a fail-closed one would
        # then refuse every write it matches, once the cluster is up.
        made = sorted(f"{k[2]}/{k[3]}" for k in seen if k[:2] == ("", "Service"))
        raise ProfileError(meta_path, "webhook_tls", "a Service made by manifests/ (namespace/name): "
                           + (clip(", ".join(made)) or "none"), f"{webhook_tls['namespace']}/{webhook_tls['service']}")


def corefile(root: Path) -> str | None:
    """coredns/Corefile's text (None without coredns/): the only entry there, at most 1 MiB,
    without TLS placeholders, server blocks in balanced braces. Raises ProfileError."""
    if not (root / "coredns").is_dir():
        return None
    entries = [p.name for p in visible_entries(root / "coredns")]
    if entries != ["Corefile"]:
        raise ProfileError(root / "coredns", "entries", "exactly one file, Corefile", repr(entries))
    if not (root / "coredns" / "Corefile").is_file():
        raise ProfileError(root / "coredns" / "Corefile", "file", "a file", what_is(root / "coredns" / "Corefile"))
    text = read_text(root / "coredns" / "Corefile")
    if len(text.encode()) > COREFILE_MAX_BYTES:
        raise ProfileError(root / "coredns" / "Corefile", "size", "at most 1 MiB (it goes into a ConfigMap)",
                           f"{len(text.encode())} bytes")
    refuse_tls_placeholders(root / "coredns" / "Corefile", text)
    problem = corefile_problem(text)
    if problem:
        raise ProfileError(root / "coredns" / "Corefile", "content", "a Corefile: server blocks in balanced braces",
                           problem)
    return text


def image_archives(root: Path) -> list[Path]:
    """The images/*.tar archives in name order, each one kind can load. Raises ProfileError."""
    images = []
    for path in visible_entries(root / "images"):
        if path.suffix != ".tar" or not path.is_file():
            raise ProfileError(path, "file", "images/*.tar image archives (docker save or OCI layout)", what_is(path))
        problem = archive_problem(path)
        if problem:  # kind load image-archive would refuse it, once the cluster is up
            raise ProfileError(path, "content", "an image archive: a tar holding manifest.json (docker save) or "
                               "index.json (OCI layout)", problem)
        images.append(path)
    return images


def check_node_files_path(root: Path) -> None:
    """files/, when there, must have a path Docker can mount. Raises ProfileError."""
    if (root / "files").is_dir() and ":" in str(root / "files"):
        # kind passes the mount to Docker as --volume=<host path>:<node path>:ro.
        raise ProfileError(root / "files", "path", "a directory path without ':' (Docker's --volume splits at it)",
                           repr(str(root / "files")))
