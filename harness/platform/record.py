"""The record of a platform profile on its cluster: the ConfigMap ``kube-system/kdrill-platform``
written once the profile is fully installed (:func:`write_record`), read back (:func:`recorded`),
and compared with the profile's directory as it is now (:func:`mismatch`)."""

from __future__ import annotations

import json
import re
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from harness.platform.reading import profile_hash

RECORD_NAMESPACE, RECORD_NAME = "kube-system", "kdrill-platform"


def write_record(profile, cluster) -> None:
    """Create the record of ``profile`` (a :class:`harness.platform.profile.PlatformProfile`:
    its :meth:`record` as JSON) on ``cluster``. Raises ApiException (one already there: 409)."""
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=RECORD_NAME,
                                                           labels={"kdrill.io/platform": profile.name}),
                              data={"profile": json.dumps(profile.record(), sort_keys=True)})
    cluster.core.create_namespaced_config_map(RECORD_NAMESPACE, body, _request_timeout=10)


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


def mismatch(profile, record: dict[str, Any] | None, cluster_name: str) -> str | None:
    """Why the cluster with ``record`` (:func:`recorded`) is not ``profile``'s (a
    :class:`harness.platform.profile.PlatformProfile`), or None when it is."""
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
