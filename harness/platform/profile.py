"""Platform profiles: a team's platform as files, built into a kind cluster, so the drills test
*its* platform (its API server flags, admission policies, CoreDNS Corefile, images), not kdrill's.

A profile is a directory (``kdrill run --platform DIR``, ``kdrill cluster create --platform DIR``)::

    platform.yaml        name (a DNS label, at most 20 characters) and description; required.
                         Optional ``webhook_tls: {service, namespace}``: a CA and a serving
                         certificate for that Service are made when the profile is installed
                         (never stored in the profile), and the manifests' ``$(tls_cert)``,
                         ``$(tls_key)`` and ``$(tls_ca_bundle)`` are replaced by them, as in a
                         scenario's ``workload.tls``: in manifests' string values only,
                         ``$(tls_key)`` only in a Secret's stringData, and the Service one the
                         manifests make
    kubeadm/*.yaml       kubeadm config patches (kind's kubeadmConfigPatches), one document each, of
                         kind ClusterConfiguration, InitConfiguration, JoinConfiguration,
                         KubeletConfiguration or KubeProxyConfiguration, of the apiVersion kind
                         writes if one is named: API server flags, admission plugins, an
                         EncryptionConfiguration or audit policy by path
    files/               mounted read-only on every node at /etc/kubernetes/kdrill-platform (the
                         patches name files there, and mount the directory into the static pod)
    manifests/*.yaml     applied in name order once the cluster is up (server-side apply, retried
                         while CRDs establish and webhooks start); their Deployments, DaemonSets
                         and StatefulSets must then be rolled out. Each file holds at least one
                         object, each object is there once (one field manager applies them all:
                         a second copy would silently replace the first), without a namespace
                         it goes to default as with kubectl
    coredns/Corefile     replaces CoreDNS's Corefile (after the manifests, retried like them while a
                         webhook of theirs refuses kube-system writes); CoreDNS is rolled out with it. Its blocks
                         are checked as CoreDNS reads them (braces in comments and strings do
                         not count)
    images/*.tar         image archives (``docker save`` or OCI layout) loaded into every node
                         before the manifests: no registry needed
    README.md            free text, not hashed

``platform.yaml`` may also say ``prepare: {command, files}``: files a command run from the checkout
writes into the profile (built here, not committed: clusters/platforms/gatekeeper's image archive
and the manifest rendered from Gatekeeper's published one). A profile with one of them missing
is refused, naming the command.

Hidden entries (names starting with ``.``: an editor's swap file, ``.gitkeep``) are ignored and
not hashed, except under ``files/``: that directory is mounted whole, so every entry there reaches
the nodes and is hashed. Nothing else may be there (a misspelt ``manifest/`` would otherwise be
silently ignored). Helm charts are not installed: render them to ``manifests/`` (``helm template``)
where Helm runs.

Symbolic links are followed where kdrill reads the file (a manifest kept elsewhere is hashed by
its content). Under ``files/`` the nodes see the links themselves, so each must be relative and
stay inside ``files/``; a link that resolves nowhere, a loop, a FIFO or device is refused.

The profile's *hash* (SHA-256 over every file's relative path and content, README.md aside; under
``files/`` also its empty directories and which files are executable, as the nodes see them) is
part of the cluster's identity: the cluster is named ``<config's name>-<profile name>`` (refused
when that is another config's cluster, e.g. a profile ``ha`` on ``single``: ``kdrill-ha``), the
profile is recorded in the ConfigMap ``kube-system/kdrill-platform`` once it is fully installed,
and a run on a cluster whose record differs from the directory is refused. Every run's evidence
carries the record (``run.json`` ``platform``), and ``kdrill compare`` compares runs of one
platform only unless asked.

Sources: kind "Configuration" (kubeadmConfigPatches, extraMounts,
https://kind.sigs.k8s.io/docs/user/configuration/), kubeadm "Customizing components with the
kubeadm API" (https://kubernetes.io/docs/setup/production-environment/tools/kubeadm/control-plane-flags/),
Kubernetes "Customizing DNS Service" (https://kubernetes.io/docs/tasks/administer-cluster/dns-custom-nameservers/).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.core.files import write_text_atomic
from harness.kube.objects import TLS_PLACEHOLDERS, expand, placeholder_keys, placeholders, tls_key_misplaced
from harness.spec.scenario import DatelessLoader, UniqueKeyLoader

PROFILE_FILE = "platform.yaml"
NODE_FILES_DIR = "/etc/kubernetes/kdrill-platform"
RECORD_NAMESPACE, RECORD_NAME = "kube-system", "kdrill-platform"
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
# YAML aliases may make a document small as written and huge once expanded (the "billion laughs"):
# kubectl and kind (go-yaml) refuse that as "excessive aliasing", but only once the cluster is up.
# A document expanding to more nodes than this (collections and their entries), mostly through
# aliases, is refused before anything else reads it.
ALIAS_EXPANSION_LIMIT = 400_000
# How much of a value found in a profile a refusal shows: a few bytes of aliases are megabytes.
SHOWN_MAX_CHARS = 200
# Deadlines, not measurements: manifests accepted (CRDs established, a profile's own webhooks up)
# and each rollout, on a loaded 2-core machine.
APPLY_DEADLINE_SECONDS = 180
ROLLOUT_DEADLINE_SECONDS = 180
ADMIN_KUBECONFIG = "/etc/kubernetes/admin.conf"
# A profile's webhook certificate outlives any kind cluster made for drills.
WEBHOOK_TLS_VALID_SECONDS = 365 * 86400


class ProfileError(ValueError):
    """A profile that cannot be used: which file, which field, what was expected, what was found."""

    def __init__(self, path: Path | str, where: str, expected: str, got: str) -> None:
        where, got = _clip(where), _clip(got)  # both may hold what the profile says
        self.path, self.where, self.expected, self.got = str(path), where, expected, got
        super().__init__(f"{path}: {where}: expected {expected}, got {got}")


def _clip(text: str) -> str:
    """``text``, cut to :data:`SHOWN_MAX_CHARS` characters when longer, saying how long it was."""
    return text if len(text) <= SHOWN_MAX_CHARS else f"{text[:SHOWN_MAX_CHARS]}... ({len(text)} characters)"


@dataclass(frozen=True)
class PlatformProfile:
    """A loaded, checked profile (see the module doc). ``files``: relative path -> SHA-256 of every
    hashed file (:func:`_tree` says which, and how files/ is told apart); ``hash``: the profile's
    SHA-256 (hex)."""

    root: Path
    name: str
    description: str
    kubeadm_patches: list[str]
    manifests: list[Path]
    corefile: str | None
    images: list[Path]
    has_node_files: bool
    files: dict[str, str] = field(default_factory=dict)
    hash: str = ""
    webhook_tls: dict[str, str] | None = None  # {"service", "namespace"}: a serving certificate made at install

    def record(self) -> dict[str, Any]:
        """What the cluster and the evidence keep: name, description, hash, files."""
        return {"name": self.name, "description": self.description, "hash": self.hash, "files": dict(self.files)}

    def cluster_name(self, base_name: str) -> str:
        return f"{base_name}-{self.name}"


def _unreadable(path: Path, exc: OSError) -> ProfileError:
    return ProfileError(path, "file", "a file kdrill can read", f"{type(exc).__name__}: {exc.strerror or exc}")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as stream:
            for chunk in iter(lambda: stream.read(1 << 20), b""):
                digest.update(chunk)
    except OSError as exc:
        raise _unreadable(path, exc) from None
    return digest.hexdigest()


def _read_text(path: Path) -> str:
    """``path`` as UTF-8 (whatever the locale: the cluster reads these bytes as UTF-8). Raises
    ProfileError for a file that cannot be read or is not UTF-8."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _unreadable(path, exc) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProfileError(path, "content", "UTF-8 text", f"byte {data[exc.start]:#04x} at offset {exc.start}, "
                           "not UTF-8") from None


def _what(path: Path) -> str:
    """``path``'s name, and what it is when not a file: what a refusal says it got."""
    if path.is_dir():
        return repr(path.name + "/") + " (a directory)"
    if not path.exists():
        return repr(path.name) + (" (a link that resolves nowhere)" if path.is_symlink() else " (not there)")
    return repr(path.name) + ("" if path.is_file() else " (not a regular file)")


def _refuse_non_utf8(path: Path, whole: bool = False) -> None:
    """Raises ProfileError when ``path``'s name (``whole``: all of it) is not UTF-8. The hash, the
    cluster's record (JSON) and the kind config name files in UTF-8; Python reads a name of other
    bytes with each such byte as a lone surrogate, which no encoder takes."""
    text = str(path) if whole else path.name
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        place, what = (path, "path") if whole else (path.parent, "file name")
        raise ProfileError(place, what, f"a UTF-8 {what}", repr(os.fsencode(text))) from None


def profile_hash(files: dict[str, str]) -> str:
    """SHA-256 (hex) over ``files`` (relative path -> content SHA-256, see :func:`_tree`), in path order."""
    digest = hashlib.sha256()
    for rel in sorted(files):
        digest.update(f"{rel}\0{files[rel]}\n".encode())
    return digest.hexdigest()


def _yaml_documents(path: Path, keep_empty: bool = False, loader: type = DatelessLoader) -> list[Any]:
    """The documents of YAML file ``path``; empty ones (None) only with ``keep_empty``, so that a
    document's number is its place in the file. Read as the scenario loader reads dates (strings,
    as kubectl and kind read them), by ``loader``. Raises ProfileError."""
    text = _read_text(path)
    try:
        return [d for d in yaml.load_all(text, Loader=loader) if keep_empty or d is not None]  # noqa: S506 - safe
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        # A constructor's refusal (a duplicate key in platform.yaml) is of YAML that parsed.
        got = f"{problem}{at}" if isinstance(exc, yaml.constructor.ConstructorError) else \
            f"unparseable YAML ({problem}{at})"
        raise ProfileError(path, "content", "YAML", got) from None
    except RecursionError:  # PyYAML composes nested collections recursively
        raise ProfileError(path, "content", "YAML nested less deeply", "collections nested deeper than the "
                           "YAML parser can follow") from None
    except ValueError as exc:  # an integer of more digits than Python converts
        raise ProfileError(path, "content", "YAML numbers of a sane size", str(exc)) from None


def _expands_too_far(doc: Any) -> bool:
    """Whether YAML aliases expand ``doc`` past :data:`ALIAS_EXPANSION_LIMIT` nodes, most of them
    repeats: each collection and each of its entries, an alias counted as often as it is used
    (about as go-yaml counts them for kubectl and kind). Entries count, not only collections: a
    list of 10,000 strings used 10,000 times is few collections but 100 million values. It stops
    once past the limit, so a bomb costs it no more than that."""
    seen: set[int] = set()
    expanded = distinct = 0
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        weight = 1 + len(node)
        expanded += weight
        if id(node) not in seen:
            seen.add(id(node))
            distinct += weight
        if expanded > ALIAS_EXPANSION_LIMIT and expanded > 10 * distinct:
            return True
        stack.extend(children)
    return False


def _refuse_alias_bombs(path: Path, docs: list[Any], reader: str | None = None, numbered: bool = False) -> None:
    """Refuses a document of ``docs`` that :func:`_expands_too_far`: first, before any check reads
    a value (showing it would take megabytes, and as long). ``reader``: who would refuse it once
    the cluster is up; ``numbered``: the field is "document N", not "content"."""
    for i, doc in enumerate(docs):
        if _expands_too_far(doc):
            raise ProfileError(path, f"document {i + 1}" if numbered else "content",
                               f"YAML aliases expanding to at most {ALIAS_EXPANSION_LIMIT} nodes",
                               "more" + (f" ({reader} would refuse it as excessive aliasing)" if reader else ""))


def _corefile_problem(text: str) -> str | None:
    """Why ``text`` is not a Corefile of balanced server blocks, or None: read by the same parser
    the DNS drill reads the cluster's Corefile with (harness.components.dns.parse_corefile), so a
    profile's Corefile that loads is one the drill can read."""
    from harness.components.dns import parse_corefile

    try:
        blocks = parse_corefile(text)
    except ValueError as exc:
        return str(exc)
    return None if blocks else "no server block"


# Magic numbers of the compressed archives tarfile reads: to say which one a damaged archive is.
_COMPRESSIONS = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz"}


def _archive_problem(path: Path) -> str | None:
    """Why ``path`` is not an image archive kind can load, or None: not a tar archive (compressed
    or not), a damaged one, or one without an image manifest."""
    import bz2
    import gzip
    import lzma
    import tarfile
    import zlib

    try:
        with path.open("rb") as stream:
            head = stream.read(6)
    except OSError as exc:
        raise _unreadable(path, exc) from None
    compression = next((name for magic, name in _COMPRESSIONS.items() if head.startswith(magic)), None)
    names: set[str] = set()
    not_tar: Exception | None = None
    try:
        if compression is None:
            try:
                archive = tarfile.open(path, "r:")  # seeks past each member's content
            except tarfile.ReadError:
                return f"not a tar archive ({path.stat().st_size} bytes)"
            with archive:
                names = {m.name.removeprefix("./") for m in archive}
        else:
            opener = {"gzip": gzip.open, "bzip2": bz2.open, "xz": lzma.open}[compression]
            with opener(path) as stream:
                try:
                    with tarfile.open(fileobj=stream, mode="r|") as archive:
                        names = {m.name.removeprefix("./") for m in archive}
                except tarfile.TarError as exc:
                    not_tar = exc
                # Damaged data can read as a bad header or as the archive's end, and the stream's
                # checksum is checked only at its own end: read on to it, so damage is said as such.
                while stream.read(1 << 20):
                    pass
    except OSError as exc:
        if exc.errno is not None:  # the file, not its content: gzip and bzip2 report damage without an errno
            raise _unreadable(path, exc) from None
        return f"a damaged {compression or 'tar'} archive ({_error_line(exc)})"
    except (tarfile.TarError, EOFError, lzma.LZMAError, zlib.error) as exc:
        return f"a damaged {compression or 'tar'} archive ({_error_line(exc)})"
    if not_tar is not None:
        return f"{compression}-compressed, but not a tar archive ({_error_line(not_tar)})"
    return None if names & {"manifest.json", "index.json"} else f"a tar archive without either ({len(names)} entries)"


def _error_line(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'no detail'}"


def _entries(directory: Path) -> list[Path]:
    """The entries of ``directory`` but hidden ones, in name order; none when it is not there."""
    return sorted(p for p in directory.iterdir() if not p.name.startswith(".")) if directory.is_dir() else []


def _tree(root: Path) -> dict[str, str]:
    """What the hash covers: relative path -> content SHA-256 of every file but README.md and
    hidden ones, following symbolic links (a symlinked ``manifests/`` is read, so it is hashed).
    Under ``files/``, mounted as it is on every node: hidden entries too, an executable file as
    ``<sha256> executable``, an empty directory as ``<path>/`` -> ``directory``. Raises
    ProfileError for a link that resolves nowhere or in a loop, a link under ``files/`` that
    leaves it or is absolute (the nodes would see another file than the one hashed), and anything
    but files and directories."""
    node_files = (root / "files").resolve()
    tree: dict[str, str] = {}

    def visit(path: Path, rel: str, ancestors: tuple[Path, ...]) -> None:
        _refuse_non_utf8(path)
        under_files = rel.startswith("files/")
        if under_files and path.is_symlink():
            target = os.readlink(path)
            inside = os.path.normpath(os.path.join(os.path.dirname(rel), target))
            if (os.path.isabs(target) or not inside.startswith("files/")
                    or not Path(os.path.realpath(path)).is_relative_to(node_files)):
                raise ProfileError(path, "symlink", f"a relative link to a file inside files/ (the nodes see files/ "
                                   f"alone, at {NODE_FILES_DIR})", f"a link to {target!r}")
        try:
            mode = path.stat().st_mode
        except OSError as exc:
            raise ProfileError(path, "file", "a file or directory", f"a link that resolves nowhere ({exc.strerror})") \
                from None
        if stat.S_ISDIR(mode):
            real = path.resolve()
            if real in ancestors:
                raise ProfileError(path, "directory", "a directory tree", f"a link back to {real} (a loop)")
            mounted = under_files or rel == "files"
            children = [c for c in sorted(path.iterdir()) if mounted or not c.name.startswith(".")]
            if not children and mounted:
                tree[f"{rel}/"] = "directory"  # mounted: a patch may name it (hostPath type Directory)
            for child in children:
                visit(child, f"{rel}/{child.name}", ancestors + (real,))
        elif stat.S_ISREG(mode):
            # The nodes see the mode too; like git, only whether it is executable (a credential
            # provider's plugin), not the bits a checkout's umask decides.
            tree[rel] = _sha256(path) + (" executable" if under_files and mode & 0o111 else "")
        else:
            raise ProfileError(path, "file", "a regular file or directory", "a FIFO, socket or device")

    for entry in sorted(root.iterdir()):
        if not entry.name.startswith(".") and entry.name != "README.md":
            visit(entry, entry.name, (root,))
    return tree


def _tls_placeholders(value: Any) -> set[str]:
    # Only these three are replaced: a manifest's other $(name) strings are the team's own
    # (e.g. Kubernetes' dependent environment variables), left as written.
    return placeholders(value) & set(TLS_PLACEHOLDERS)


def _tls_misplaced(doc: dict[str, Any]) -> tuple[str, str, str] | None:
    """(field after the document's, expected, got) when ``doc`` holds a TLS placeholder where it would not be replaced
    or would not work, or None; as a scenario's workload.tls is checked (harness/spec/scenario.py)."""
    in_keys = [path[-1] for path in placeholder_keys(doc) if _tls_placeholders(path[-1])]
    if in_keys:
        return "", "$(tls_*) in string values only (mapping keys are not replaced)", repr(in_keys[0])
    misplaced = tls_key_misplaced(doc)
    if misplaced:
        return "", "$(tls_key) only in the stringData of a Secret", misplaced
    # data and binaryData hold base64, and $(tls_cert) is replaced by PEM text ($(tls_ca_bundle) is base64).
    binary = {"Secret": "data", "ConfigMap": "binaryData"}.get(doc["kind"])
    if binary and "tls_cert" in _tls_placeholders(doc.get(binary)):
        return f".{binary}", f"$(tls_cert) in stringData or data, not {binary} (it holds base64; $(tls_cert) is PEM)", \
            f"$(tls_cert) in {binary}"
    return None


def _refuse_tls_placeholders(path: Path, text: str) -> None:
    """A kubeadm patch or the Corefile goes to the cluster as written: a TLS placeholder there
    would reach it unreplaced."""
    found = sorted(_tls_placeholders(text))
    if found:
        raise ProfileError(path, "content", "no $(tls_cert), $(tls_key) or $(tls_ca_bundle) (replaced in manifests/ "
                           "only)", ", ".join(f"$({n})" for n in found))


def manifest_text(profile: PlatformProfile, path: Path, tls=None) -> str:
    """What ``kubectl apply`` gets for ``path``: the file as written, or, when it uses the TLS
    placeholders, its documents with ``$(tls_cert)``, ``$(tls_key)`` and ``$(tls_ca_bundle)``
    replaced from ``tls`` (a :class:`harness.components.webhook.WebhookTLS`). Raises ProfileError
    for an unreadable file."""
    text = _read_text(path)
    docs = [d for d in _yaml_documents(path) if d is not None]
    if tls is None or not any(_tls_placeholders(d) for d in docs):
        return text
    values = {"tls_cert": tls.cert_pem.decode("ascii"), "tls_key": tls.key_pem.decode("ascii"),
              "tls_ca_bundle": tls.ca_bundle}
    return yaml.safe_dump_all([expand(d, values, leave_unknown=True) for d in docs], sort_keys=False)


# Where a prepared file may be, as the loader reads each part: (pattern of its relative path, what).
PREPARED_PLACES = (
    (re.compile(r"manifests/[^/.][^/]*\.ya?ml"), "manifests/NAME.yaml"),
    (re.compile(r"images/[^/.][^/]*\.tar"), "images/NAME.tar"),
    (re.compile(r"kubeadm/[^/.][^/]*\.ya?ml"), "kubeadm/NAME.yaml"),
    (re.compile(r"coredns/Corefile"), "coredns/Corefile"),
    (re.compile(r"files/(?:[^/.][^/]*/)*[^/.][^/]*"), "files/PATH (no hidden names)"),
)


def _check_prepared(root: Path, meta_path: Path, prepare: Any) -> None:
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
            raise ProfileError(meta_path, "prepare.files", f"paths inside the profile where its parts are read: {places}",
                               repr(rel))
        if normal in seen:
            raise ProfileError(meta_path, "prepare.files", "each path once", repr(rel))
        seen.add(normal)
    missing = [rel for rel in sorted(seen) if not (root / rel).is_file()]
    if missing:
        first = root / missing[0]
        got = "no such file" if not first.exists() and not first.is_symlink() else _what(first)
        command, written = _clip(prepare["command"].strip()), _clip(", ".join(sorted(seen)))
        raise ProfileError(first, "file", f"a file that `{command}` writes: run it from the kdrill checkout first "
                           f"(platform.yaml prepare; it writes {written})",
                           got + (f"; also missing: {', '.join(missing[1:])}" if missing[1:] else ""))


def load(directory: str | Path) -> PlatformProfile:
    """Read and check the profile in ``directory``. Raises ProfileError (file, field, expected,
    got) for anything the module doc does not allow; reads no cluster."""
    root = Path(directory).expanduser().resolve()
    if not root.is_dir():
        raise ProfileError(root, "--platform", "a directory holding platform.yaml (see `kdrill cluster create --help`)",
                           "no such directory" if not root.exists() else "a file")
    _refuse_non_utf8(root, whole=True)  # written into the kind config kdrill makes of it
    for entry in sorted(root.iterdir()):
        if entry.name.startswith("."):
            continue
        kind = ALLOWED_ENTRIES.get(entry.name)
        if kind is None or (kind == "dir") != entry.is_dir():
            allowed = ", ".join(f"{n}/" if k == "dir" else n for n, k in ALLOWED_ENTRIES.items())
            raise ProfileError(entry, "entry", f"only {allowed}", _what(entry))
    meta_path = root / PROFILE_FILE
    if not meta_path.is_file():
        raise ProfileError(meta_path, "file", "platform.yaml with name and description", "no such file")
    # kdrill's own file, read as scenarios are: a second `name:` would silently win, and a key
    # that is not a string (`1:`, `~:`) names no field.
    docs = _yaml_documents(meta_path, loader=UniqueKeyLoader)
    _refuse_alias_bombs(meta_path, docs)
    meta = docs[0] if len(docs) == 1 else None
    if not isinstance(meta, dict):
        raise ProfileError(meta_path, "content", "one mapping with name and description", f"{len(docs)} documents"
                           if len(docs) != 1 else type(meta).__name__)
    unknown = sorted(set(meta) - {"name", "description", "webhook_tls", "prepare"})
    if unknown:
        raise ProfileError(meta_path, unknown[0], "only name, description, webhook_tls and prepare", repr(unknown[0]))
    webhook_tls = meta.get("webhook_tls")
    if webhook_tls is not None:
        if not isinstance(webhook_tls, dict) or set(webhook_tls) != {"service", "namespace"}:
            raise ProfileError(meta_path, "webhook_tls", "a mapping with service and namespace (the webhook's "
                               "Service, whose serving certificate is made when the profile is installed)",
                               repr(webhook_tls))
        for key, pattern, what in (("service", SERVICE, "a Service name: a DNS label starting with a letter"),
                                   ("namespace", NAMESPACE, "a namespace name: a DNS label")):
            if not isinstance(webhook_tls[key], str) or not pattern.fullmatch(webhook_tls[key]):
                raise ProfileError(meta_path, f"webhook_tls.{key}", f"{what} of at most 63 characters (a-z, 0-9, -)",
                                   repr(webhook_tls[key]))
    name, description = meta.get("name"), meta.get("description")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ProfileError(meta_path, "name", "a DNS label of at most 20 characters (a-z, 0-9, -), part of the "
                           "cluster's name", repr(name))
    if not isinstance(description, str) or not description.strip():
        raise ProfileError(meta_path, "description", "a non-empty string: what this platform is", repr(description))
    _check_prepared(root, meta_path, meta.get("prepare"))

    patches = []
    for path in _entries(root / "kubeadm"):
        if path.suffix not in (".yaml", ".yml") or not path.is_file():
            raise ProfileError(path, "file", "kubeadm/*.yaml files only", _what(path))
        docs = _yaml_documents(path)
        _refuse_alias_bombs(path, docs, "kind")
        if len(docs) != 1 or not isinstance(docs[0], dict):
            raise ProfileError(path, "content", "one YAML mapping (one kubeadm config patch per file)",
                               f"{len(docs)} documents" if len(docs) != 1 else f"a {type(docs[0]).__name__}")
        if docs[0].get("kind") not in KUBEADM_KINDS:
            raise ProfileError(path, "kind", " or ".join(KUBEADM_KINDS), repr(docs[0].get("kind")))
        api_version, want = docs[0].get("apiVersion"), KUBEADM_API_VERSIONS[docs[0]["kind"]]
        if api_version is not None and api_version != want:
            raise ProfileError(path, "apiVersion", f"{want} or none (what kind v0.31 writes: it skips a patch of "
                               "another version without a word)", repr(api_version))
        text = _read_text(path)
        if len(text.encode()) > KUBEADM_PATCH_MAX_BYTES:
            raise ProfileError(path, "size", f"at most {KUBEADM_PATCH_MAX_BYTES // 1024} KiB (kind reads a patch "
                               "through a 64 KiB buffer)", f"{len(text.encode())} bytes")
        _refuse_tls_placeholders(path, text)
        patches.append(text)

    manifests = []
    seen: dict[tuple[str, str, str, str], str] = {}  # (group, kind, namespace, name) -> where first
    for path in _entries(root / "manifests"):
        if path.suffix not in (".yaml", ".yml") or not path.is_file():
            raise ProfileError(path, "file", "manifests/*.yaml files only", _what(path))
        objects = 0
        docs = _yaml_documents(path, keep_empty=True)
        _refuse_alias_bombs(path, docs, "kubectl", numbered=True)
        for i, doc in enumerate(docs):
            if doc is None:
                continue
            where = f"document {i + 1}"
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
            used = _tls_placeholders(doc)
            if used and webhook_tls is None:
                raise ProfileError(path, where, "$(tls_cert), $(tls_key) and $(tls_ca_bundle) only with webhook_tls "
                                   "in platform.yaml (which says whose certificate they are)",
                                   ", ".join(f"$({n})" for n in sorted(used)))
            misplaced = _tls_misplaced(doc)
            if misplaced:
                raise ProfileError(path, where + misplaced[0], misplaced[1], misplaced[2])
            objects += 1
        if not objects:  # kubectl apply refuses a file with no object: after the cluster is up
            raise ProfileError(path, "content", "at least one Kubernetes object", "none")
        manifests.append(path)

    if webhook_tls is not None and ("", "Service", webhook_tls["namespace"], webhook_tls["service"]) not in seen:
        # A certificate for a Service no manifest makes fits no webhook: a fail-closed one would
        # then refuse every write it matches, once the cluster is up.
        made = sorted(f"{k[2]}/{k[3]}" for k in seen if k[:2] == ("", "Service"))
        raise ProfileError(meta_path, "webhook_tls", "a Service made by manifests/ (namespace/name): "
                           + (_clip(", ".join(made)) or "none"), f"{webhook_tls['namespace']}/{webhook_tls['service']}")

    corefile = None
    if (root / "coredns").is_dir():
        entries = [p.name for p in _entries(root / "coredns")]
        if entries != ["Corefile"]:
            raise ProfileError(root / "coredns", "entries", "exactly one file, Corefile", repr(entries))
        if not (root / "coredns" / "Corefile").is_file():
            raise ProfileError(root / "coredns" / "Corefile", "file", "a file", _what(root / "coredns" / "Corefile"))
        corefile = _read_text(root / "coredns" / "Corefile")
        if len(corefile.encode()) > COREFILE_MAX_BYTES:
            raise ProfileError(root / "coredns" / "Corefile", "size", "at most 1 MiB (it goes into a ConfigMap)",
                               f"{len(corefile.encode())} bytes")
        _refuse_tls_placeholders(root / "coredns" / "Corefile", corefile)
        problem = _corefile_problem(corefile)
        if problem:
            raise ProfileError(root / "coredns" / "Corefile", "content", "a Corefile: server blocks in balanced braces",
                               problem)

    images = []
    for path in _entries(root / "images"):
        if path.suffix != ".tar" or not path.is_file():
            raise ProfileError(path, "file", "images/*.tar image archives (docker save or OCI layout)", _what(path))
        problem = _archive_problem(path)
        if problem:  # kind load image-archive would refuse it, once the cluster is up
            raise ProfileError(path, "content", "an image archive: a tar holding manifest.json (docker save) or "
                               "index.json (OCI layout)", problem)
        images.append(path)

    if (root / "files").is_dir() and ":" in str(root / "files"):
        # kind passes the mount to Docker as --volume=<host path>:<node path>:ro.
        raise ProfileError(root / "files", "path", "a directory path without ':' (Docker's --volume splits at it)",
                           repr(str(root / "files")))

    files = _tree(root)
    return PlatformProfile(root=root, name=name, description=description.strip(), kubeadm_patches=patches,
                           manifests=manifests, corefile=corefile, images=images,
                           has_node_files=(root / "files").is_dir(), files=files, hash=profile_hash(files),
                           webhook_tls=dict(webhook_tls) if webhook_tls else None)


def check_cluster_name(profile: PlatformProfile, config: str | Path) -> str | None:
    """The name of the cluster ``profile`` makes from kind config ``config`` (a name in
    clusters/ or a path), or None when there is no such config (KindProvider says so). Raises
    ProfileError when another config in clusters/ names its own cluster so: the profile's
    cluster and that plain one would be one cluster, the plain one taken for a failed
    installation (and its delete command offered), or the profile's drilled as that config's."""
    from harness.kube.providers import ProviderError
    from harness.kube.providers.kind import CLUSTERS_DIR, cluster_name_of, config_path

    try:
        base = config_path(str(config))
        name = profile.cluster_name(cluster_name_of(base))
    except (ProviderError, OSError, yaml.YAMLError, AttributeError):
        return None
    for other in sorted(CLUSTERS_DIR.glob("*.yaml")):
        try:
            taken = other.resolve() != base.resolve() and cluster_name_of(other) == name
        except (OSError, yaml.YAMLError, AttributeError):
            continue
        if taken:
            raise ProfileError(profile.root / PROFILE_FILE, "name", f"a name that, after {base.name}'s cluster "
                               "name, names no other kind config's cluster",
                               f"{profile.name!r}: the cluster would be {name}, the cluster of {other}")
    return name


def kind_config(profile: PlatformProfile, base: dict[str, Any]) -> dict[str, Any]:
    """The kind config ``base`` (a parsed kind config) with the profile built in: its cluster name
    ``<base name>-<profile name>``, the profile's kubeadm patches after the base's own, and
    ``files/`` mounted read-only on every node at :data:`NODE_FILES_DIR`. ``base`` is not changed."""
    config = json.loads(json.dumps(base))
    config["name"] = profile.cluster_name(base.get("name") or "kind")
    config["kubeadmConfigPatches"] = list(config.get("kubeadmConfigPatches") or []) + list(profile.kubeadm_patches)
    if profile.has_node_files:
        # kind makes one control-plane node of a config that lists none (v1alpha4 defaults): it
        # needs the mount too, so it is listed here.
        config["nodes"] = config.get("nodes") or [{"role": "control-plane"}]
        for node in config["nodes"]:
            node.setdefault("extraMounts", []).append(
                {"hostPath": str(profile.root / "files"), "containerPath": NODE_FILES_DIR, "readOnly": True})
    return config


def write_kind_config(profile: PlatformProfile, base_config: Path) -> Path:
    """Write :func:`kind_config` of ``base_config`` under ``$KDRILL_CACHE/platforms/`` (default
    ``~/.cache/kdrill``), named by the profile's hash; returns its path."""
    cache = Path(os.environ.get("KDRILL_CACHE", Path.home() / ".cache" / "kdrill"))
    out = cache / "platforms" / f"{profile.name}-{profile.hash[:12]}" / f"{base_config.stem}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    config = kind_config(profile, yaml.safe_load(base_config.read_text()) or {})
    # Atomic: pytest-xdist workers write it at the same moment (harness/core/workers.py).
    write_text_atomic(out, f"# kind config {base_config.name} with platform profile {profile.root} (sha256 "
                      f"{profile.hash}),\n# written by kdrill (harness/platform/profile.py); not to be edited.\n"
                      + yaml.safe_dump(config, sort_keys=False))
    return out


def _record_problem(record: Any) -> str | None:
    """Why ``record`` (the JSON of a cluster's record) is not a record :meth:`PlatformProfile.record`
    wrote, or None. Its hash must be that of its files: a record edited or written by hand is
    told apart from one kdrill wrote."""
    if not isinstance(record, dict):
        kind = {type(None): "null", list: "array", str: "string", bool: "boolean"}.get(type(record), "number")
        return f"a JSON {kind}, not an object"
    if not isinstance(record.get("name"), str) or not isinstance(record.get("hash"), str) \
            or not re.fullmatch(r"[0-9a-f]{64}", record["hash"]):
        return f"name {record.get('name')!r} and hash {record.get('hash')!r}, not a name and a SHA-256"
    files = record.get("files")
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        return "no map of files to SHA-256"
    if profile_hash(files) != record["hash"]:
        return f"hash {record['hash'][:12]}, which is not the hash of its own file list ({profile_hash(files)[:12]})"
    return None


def recorded(cluster) -> dict[str, Any] | None:
    """The profile record of ``cluster`` (``kube-system/kdrill-platform``), or None when there
    is no such ConfigMap. One that is there but is not a record kdrill wrote (no ``profile`` key,
    not JSON, a hash not of its files: :func:`_record_problem`) gives ``{"hash": None, "note":
    why}``, which evidence keeps as it is and :func:`mismatch` refuses. Raises ApiException for
    anything but not found."""
    from kubernetes.client.exceptions import ApiException

    try:
        cm = cluster.core.read_namespaced_config_map(RECORD_NAME, RECORD_NAMESPACE, _request_timeout=10)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    where = f"{RECORD_NAMESPACE}/{RECORD_NAME}"
    text = (cm.data or {}).get("profile")
    if not isinstance(text, str):
        return {"hash": None, "note": f"{where} is there, without a profile record (no data.profile)"}
    try:
        record = json.loads(text)
    except json.JSONDecodeError:
        return {"hash": None, "note": f"{where} is there, its data.profile not JSON"}
    problem = _record_problem(record)
    return {"hash": None, "note": f"{where} is not a record kdrill wrote: {problem}"} if problem else record


def mismatch(profile: PlatformProfile, record: dict[str, Any] | None, cluster_name: str) -> str | None:
    """Why the cluster with ``record`` (:func:`recorded`) is not ``profile``'s, or None when it is."""
    delete = f"kdrill cluster delete --platform {profile.root}"
    if record is None:
        # Not "failed part way" alone: a cluster made without the profile has no record either.
        return (f"kind cluster {cluster_name} has no complete installation of platform profile {profile.name} (no "
                f"{RECORD_NAMESPACE}/{RECORD_NAME}): it was made without the profile, or an installation failed part "
                f"way; delete it to build it with the profile: {delete}")
    if not record.get("hash"):
        return (f"kind cluster {cluster_name} cannot be told to be platform profile {profile.name}'s: "
                f"{record.get('note') or 'its record has no hash'}; delete it to build it again: {delete}")
    if record["hash"] != profile.hash:
        files = record.get("files") if isinstance(record.get("files"), dict) else {}
        changed = sorted(set(files) ^ set(profile.files)
                         | {f for f in profile.files if files.get(f) not in (None, profile.files[f])})
        other = "" if record.get("name") == profile.name else " (another profile under the same cluster name)"
        return (f"kind cluster {cluster_name} was built from platform profile {record.get('name')}{other} with hash "
                f"{str(record['hash'])[:12]}, and {profile.root} now hashes to {profile.hash[:12]} "
                f"(changed: {', '.join(changed) or 'unknown'}); delete the cluster to rebuild it: {delete}")
    return None


def _kubectl(cluster, node: str, args: list[str], stdin: str | None = None, timeout_seconds: float = 60):
    # The node's own kubectl: the same version as the cluster (the host's may be far older).
    return cluster.node_exec(node, ["kubectl", f"--kubeconfig={ADMIN_KUBECONFIG}", *args], stdin=stdin,
                             timeout_seconds=timeout_seconds, check=False)


def install(profile: PlatformProfile, cluster, kind_provider) -> dict[str, float]:
    """Install ``profile`` into the new kind cluster: load its images into every node, apply its
    manifests (retried until accepted) and wait for their rollouts, replace CoreDNS's Corefile
    and roll CoreDNS out, then record the profile. Returns seconds per step. Raises
    ProviderError naming the file and the API server's or kubectl's message."""
    from harness.core.waiting import wait_until
    from harness.kube.providers import ProviderError

    node = cluster.nodes_by_role["control-plane"][0]
    steps: dict[str, float] = {}
    started = time.monotonic()
    for archive in profile.images:
        kind_provider._run("load", "image-archive", str(archive), "--name", kind_provider.name, timeout_seconds=600)
    steps["images"] = time.monotonic() - started

    started = time.monotonic()
    workloads: list[str] = []
    tls = None
    if profile.webhook_tls:
        from harness.components.webhook import generate_webhook_tls

        # Made here, for this cluster, never stored in the profile: like cert-manager would.
        tls = generate_webhook_tls(profile.webhook_tls["service"], profile.webhook_tls["namespace"],
                                   valid_seconds=WEBHOOK_TLS_VALID_SECONDS)
    for path in profile.manifests:
        try:
            text = manifest_text(profile, path, tls)
        except ProfileError as exc:  # gone or changed since it was loaded
            raise ProviderError(f"platform profile {profile.name}: {exc}") from None
        last: dict[str, Any] = {}

        def accepted(text=text) -> bool:  # a CRD establishing or a webhook starting: asked again
            last["result"] = _kubectl(cluster, node, ["apply", "--server-side", "--force-conflicts",
                                                      "--field-manager=kdrill-platform", "-f", "-"], stdin=text)
            return last["result"].returncode == 0

        if not wait_until(accepted, APPLY_DEADLINE_SECONDS, interval_seconds=2.0,
                          description=f"platform manifest {path.name} accepted").ok:
            result = last.get("result")
            said = (result.stderr or result.stdout).strip()[-1500:] if result is not None else "no answer"
            raise ProviderError(f"platform profile {profile.name}: {path} not accepted within "
                                f"{APPLY_DEADLINE_SECONDS} s: {said}")
        for doc in _yaml_documents(path):
            if doc["kind"] in ("Deployment", "DaemonSet", "StatefulSet"):
                ns = doc["metadata"].get("namespace") or "default"
                workloads.append(f"{ns}/{doc['kind'].lower()}/{doc['metadata']['name']}")
    for ref in workloads:
        ns, rest = ref.split("/", 1)
        result = _kubectl(cluster, node, ["-n", ns, "rollout", "status", rest, f"--timeout={ROLLOUT_DEADLINE_SECONDS}s"],
                          timeout_seconds=ROLLOUT_DEADLINE_SECONDS + 30)
        if result.returncode != 0:
            raise ProviderError(f"platform profile {profile.name}: {ref} not rolled out within "
                                f"{ROLLOUT_DEADLINE_SECONDS} s: {(result.stderr or result.stdout).strip()[-800:]}")
    steps["manifests"] = time.monotonic() - started

    if profile.corefile is not None:
        started = time.monotonic()
        # Retried like the manifests (an error is "not yet"): a profile's webhook that takes in
        # kube-system ConfigMaps refuses this write until the node's kube-proxy has its backend's
        # endpoint, a moment after the rollout above says Ready (measured: connection refused).
        def corefile_written() -> bool:
            cluster.core.patch_namespaced_config_map("coredns", "kube-system", {"data": {"Corefile": profile.corefile}},
                                                     _request_timeout=10)
            return True

        waited = wait_until(corefile_written, APPLY_DEADLINE_SECONDS, interval_seconds=2.0,
                            description="the coredns ConfigMap updated with the profile's Corefile")
        if not waited.ok:
            raise ProviderError(f"platform profile {profile.name}: the API server did not accept the coredns "
                                f"ConfigMap with {profile.root / 'coredns' / 'Corefile'} within "
                                f"{APPLY_DEADLINE_SECONDS} s: {(waited.last_error or 'no answer')[-800:]}")
        # The reload plugin would pick it up within about 30 s, on each replica on its own: a
        # rollout makes every replica run it, and fails loudly when CoreDNS refuses it.
        annotation = {"kdrill.io/platform-corefile": hashlib.sha256(profile.corefile.encode()).hexdigest()[:16]}
        cluster.apps.patch_namespaced_deployment("coredns", "kube-system", {"spec": {"template": {"metadata": {
            "annotations": annotation}}}}, _request_timeout=10)
        result = _kubectl(cluster, node, ["-n", "kube-system", "rollout", "status", "deployment/coredns",
                                          f"--timeout={ROLLOUT_DEADLINE_SECONDS}s"],
                          timeout_seconds=ROLLOUT_DEADLINE_SECONDS + 30)
        if result.returncode != 0:
            logs = _kubectl(cluster, node, ["-n", "kube-system", "logs", "-l", "k8s-app=kube-dns", "--tail=5"]).stdout
            raise ProviderError(f"platform profile {profile.name}: CoreDNS did not roll out with "
                                f"{profile.root / 'coredns' / 'Corefile'}: {result.stderr.strip()[-500:]}; "
                                f"its log: {logs.strip()[-1000:]}")
        steps["coredns"] = time.monotonic() - started

    # The record says what the cluster got: the directory must still be what was loaded (files/
    # is mounted live, manifests and images were read from it during the installation).
    try:
        now = load(profile.root).hash[:12]
    except ProfileError as exc:
        now = f"not loadable: {exc}"
    if now != profile.hash[:12]:
        raise ProviderError(f"platform profile {profile.name}: {profile.root} changed during the installation "
                            f"(sha256 {profile.hash[:12]} when read, {now} now), so what the cluster got is not "
                            f"known; not recorded: delete the cluster and create it again")

    from kubernetes import client

    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=RECORD_NAME, labels={"kdrill.io/platform": profile.name}),
                              data={"profile": json.dumps(profile.record(), sort_keys=True)})
    cluster.core.create_namespaced_config_map(RECORD_NAMESPACE, body, _request_timeout=10)
    return {k: round(v, 2) for k, v in steps.items()}
