"""Reading a platform profile's files (harness/platform/profile.py describes the layout): the
refusal every check raises (:class:`ProfileError`: file, field, expected, got), UTF-8 text, YAML
documents with alias bombs refused, image archives, a Corefile's blocks, the TLS placeholders a
manifest may hold, and the tree of hashed files with the profile's hash."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import lzma
import os
import stat
import tarfile
import zlib
from pathlib import Path
from typing import Any

import yaml

from harness.components.dns import parse_corefile
from harness.kube.objects import TLS_PLACEHOLDERS, placeholder_keys, placeholders, tls_key_misplaced
from harness.spec.scenario import DatelessLoader

PROFILE_FILE = "platform.yaml"
NODE_FILES_DIR = "/etc/kubernetes/kdrill-platform"
# YAML aliases may make a document small as written and huge once expanded (the "billion laughs"):
# kubectl and kind (go-yaml) refuse that as "excessive aliasing", but only once the cluster is up.
# A document expanding to more nodes than this (collections and their entries), mostly through
# aliases, is refused before anything else reads it.
ALIAS_EXPANSION_LIMIT = 400_000
# How much of a value found in a profile a refusal shows: a few bytes of aliases are megabytes.
SHOWN_MAX_CHARS = 200


class ProfileError(ValueError):
    """A profile that cannot be used: which file, which field, what was expected, what was found."""

    def __init__(self, path: Path | str, where: str, expected: str, got: str) -> None:
        where, got = clip(where), clip(got)  # both may hold what the profile says
        self.path, self.where, self.expected, self.got = str(path), where, expected, got
        super().__init__(f"{path}: {where}: expected {expected}, got {got}")


def clip(text: str) -> str:
    """``text``, cut to :data:`SHOWN_MAX_CHARS` characters when longer, saying how long it was."""
    return text if len(text) <= SHOWN_MAX_CHARS else f"{text[:SHOWN_MAX_CHARS]}... ({len(text)} characters)"



def unreadable(path: Path, exc: OSError) -> ProfileError:
    return ProfileError(path, "file", "a file kdrill can read", f"{type(exc).__name__}: {exc.strerror or exc}")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as stream:
            for chunk in iter(lambda: stream.read(1 << 20), b""):
                digest.update(chunk)
    except OSError as exc:
        raise unreadable(path, exc) from None
    return digest.hexdigest()


def read_text(path: Path) -> str:
    """``path`` as UTF-8 (whatever the locale: the cluster reads these bytes as UTF-8). Raises
    ProfileError for a file that cannot be read or is not UTF-8."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise unreadable(path, exc) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProfileError(path, "content", "UTF-8 text", f"byte {data[exc.start]:#04x} at offset {exc.start}, "
                           "not UTF-8") from None


def what_is(path: Path) -> str:
    """``path``'s name, and what it is when not a file: what a refusal says it got."""
    if path.is_dir():
        return repr(path.name + "/") + " (a directory)"
    if not path.exists():
        return repr(path.name) + (" (a link that resolves nowhere)" if path.is_symlink() else " (not there)")
    return repr(path.name) + ("" if path.is_file() else " (not a regular file)")


def refuse_non_utf8(path: Path, whole: bool = False) -> None:
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
    """SHA-256 (hex) over ``files`` (relative path -> content SHA-256, see :func:`hashed_tree`), in
    path order."""
    digest = hashlib.sha256()
    for rel in sorted(files):
        digest.update(f"{rel}\0{files[rel]}\n".encode())
    return digest.hexdigest()


def yaml_documents(path: Path, keep_empty: bool = False, loader: type = DatelessLoader) -> list[Any]:
    """The documents of YAML file ``path``; empty ones (None) only with ``keep_empty``, so that a
    document's number is its place in the file. Read as the scenario loader reads dates (strings,
    as kubectl and kind read them), by ``loader``. Raises ProfileError."""
    text = read_text(path)
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


def refuse_alias_bombs(path: Path, docs: list[Any], reader: str | None = None, numbered: bool = False) -> None:
    """Refuses a document of ``docs`` that :func:`_expands_too_far`: first, before any check reads
    a value (showing it would take megabytes, and as long). ``reader``: who would refuse it once
    the cluster is up; ``numbered``: the field is "document N", not "content"."""
    for i, doc in enumerate(docs):
        if _expands_too_far(doc):
            raise ProfileError(path, f"document {i + 1}" if numbered else "content",
                               f"YAML aliases expanding to at most {ALIAS_EXPANSION_LIMIT} nodes",
                               "more" + (f" ({reader} would refuse it as excessive aliasing)" if reader else ""))


def corefile_problem(text: str) -> str | None:
    """Why ``text`` is not a Corefile of balanced server blocks, or None: read by the same parser
    the DNS drill reads the cluster's Corefile with (harness.components.dns.parse_corefile), so a
    profile's Corefile that loads is one the drill can read."""
    try:
        blocks = parse_corefile(text)
    except ValueError as exc:
        return str(exc)
    return None if blocks else "no server block"


# Magic numbers of the compressed archives tarfile reads: to say which one a damaged archive is.
_COMPRESSIONS = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz"}


def archive_problem(path: Path) -> str | None:
    """Why ``path`` is not an image archive kind can load, or None: not a tar archive (compressed
    or not), a damaged one, or one without an image manifest."""
    try:
        with path.open("rb") as stream:
            head = stream.read(6)
    except OSError as exc:
        raise unreadable(path, exc) from None
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
            raise unreadable(path, exc) from None
        return f"a damaged {compression or 'tar'} archive ({_error_line(exc)})"
    except (tarfile.TarError, EOFError, lzma.LZMAError, zlib.error) as exc:
        return f"a damaged {compression or 'tar'} archive ({_error_line(exc)})"
    if not_tar is not None:
        return f"{compression}-compressed, but not a tar archive ({_error_line(not_tar)})"
    return None if names & {"manifest.json", "index.json"} else f"a tar archive without either ({len(names)} entries)"


def _error_line(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'no detail'}"


def visible_entries(directory: Path) -> list[Path]:
    """The entries of ``directory`` but hidden ones, in name order; none when it is not there."""
    return sorted(p for p in directory.iterdir() if not p.name.startswith(".")) if directory.is_dir() else []


def hashed_tree(root: Path) -> dict[str, str]:
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
        refuse_non_utf8(path)
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


def tls_placeholders(value: Any) -> set[str]:
    # Only these three are replaced: a manifest's other $(name) strings are the team's own
    # (e.g. Kubernetes' dependent environment variables), left as written.
    return placeholders(value) & set(TLS_PLACEHOLDERS)


def tls_misplaced(doc: dict[str, Any]) -> tuple[str, str, str] | None:
    """(field after the document's, expected, got) when ``doc`` holds a TLS placeholder where it would not be replaced
    or would not work, or None; as a scenario's workload.tls is checked (harness/spec/scenario.py)."""
    in_keys = [path[-1] for path in placeholder_keys(doc) if tls_placeholders(path[-1])]
    if in_keys:
        return "", "$(tls_*) in string values only (mapping keys are not replaced)", repr(in_keys[0])
    misplaced = tls_key_misplaced(doc)
    if misplaced:
        return "", "$(tls_key) only in the stringData of a Secret", misplaced
    # data and binaryData hold base64, and $(tls_cert) is replaced by PEM text ($(tls_ca_bundle) is base64).
    binary = {"Secret": "data", "ConfigMap": "binaryData"}.get(doc["kind"])
    if binary and "tls_cert" in tls_placeholders(doc.get(binary)):
        return f".{binary}", f"$(tls_cert) in stringData or data, not {binary} (it holds base64; $(tls_cert) is PEM)", \
            f"$(tls_cert) in {binary}"
    return None


def refuse_tls_placeholders(path: Path, text: str) -> None:
    """A kubeadm patch or the Corefile goes to the cluster as written: a TLS placeholder there
    would reach it unreplaced."""
    found = sorted(tls_placeholders(text))
    if found:
        raise ProfileError(path, "content", "no $(tls_cert), $(tls_key) or $(tls_ca_bundle) (replaced in manifests/ "
                           "only)", ", ".join(f"$({n})" for n in found))


