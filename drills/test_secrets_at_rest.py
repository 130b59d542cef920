"""Drill: are Secrets encrypted at rest? (scenarios/secrets-at-rest.yaml)

A Secret with a random value is written through the API; its key is then read straight from etcd
with etcdctl in the etcd static pod (the member's own client certificate: what anyone holding an
etcd backup, a member's disk or its client key has). Without ``--encryption-provider-config`` the
API server stores the Secret as its protobuf encoding, so the value's bytes are there as written,
on every member. Deleted, the Secret's value stays in etcd's key history until the next
compaction, readable at its old revision.

Case ``encrypted`` checks the other half of the document: on a one-node cluster the drill makes
for it (``drill-cluster``: kube-apiserver given an EncryptionConfiguration with a secretbox key
through the kind config's kubeadm patches, deleted at the end), the same Secret is stored as
``k8s:enc:secretbox:v1:<key name>:`` followed by ciphertext, with no plaintext in its history,
and still reads back through the API. The session's vital signs watch the HA cluster; that
cluster's own are watched too (same probes) and must flag nothing.

Why a Python drill: the check reads etcd's raw bytes on the control-plane nodes, which no
data-only probe does.

The value never leaves this process: evidence has its SHA-256, the etcd key, revisions and the
first bytes of the stored value (the envelope's prefix), nothing else.
"""

from __future__ import annotations

import base64

import pytest

from harness.components.etcd import RevisionCompacted, get_key, running_member_node
from harness.components.topology import discover
from harness.core.waiting import wait_until
from harness.faults.planted_secret import DATA_KEY, PlantedSecret, value_digest
from harness.kube.workloads import ensure_namespace
from harness.scaffolding.drill_cluster import DrillCluster, expected_prefix

ENCRYPTED_PREFIX = b"k8s:enc:"  # "<prefix>:<provider>:<version>:<key name>:" ahead of the ciphertext
PROTOBUF_PREFIX = b"k8s\x00"  # the API server's protobuf envelope, unencrypted


def _prefix(stored: bytes) -> str:
    """The stored value's first bytes, printable (the envelope, never the secret itself)."""
    if stored.startswith(ENCRYPTED_PREFIX):  # k8s:enc:<provider>:v1:<key name>: (five colons)
        parts = stored.split(b":", 5)
        head = b":".join(parts[:5]) + b":" if len(parts) == 6 else stored[:len(ENCRYPTED_PREFIX)]
    else:
        head = stored[:len(PROTOBUF_PREFIX)]
    return head.decode("ascii", errors="backslashreplace").replace("\x00", "\\x00")


@pytest.mark.cluster
@pytest.mark.node_access
@pytest.mark.scenario("secrets-at-rest")
def test_secrets_at_rest(drill):
    provider = drill.params.get("encryption_provider")
    if provider is None:
        with drill.phase("setup"):
            drill.fresh_namespace()
        _plant_and_read(drill, drill.cluster, drill.namespace, drill.topology.control_plane,
                        drill.topology.etcd_members, encrypted_by=None)
    else:
        _on_an_encrypted_cluster(drill, provider)
    drill.expectations.assert_all()


def _on_an_encrypted_cluster(drill, provider: str) -> None:
    """The planted Secret on a cluster of the drill's own whose kube-apiserver encrypts Secrets
    with ``provider``, with that cluster's vital signs watched throughout."""
    from harness.engine.vitals import VitalSigns

    made = DrillCluster(drill.cluster, f"{drill.cluster.name}-enc", provider)
    with drill.inject(made):
        encrypted = made.created
        topology = discover(encrypted)
        drill.observe("encrypted_cluster", {"name": encrypted.name, "nodes": topology.nodes(),
                                            "create_seconds": round(made.create_seconds or 0, 1),
                                            "etcd_note": topology.etcd_note})
        # No ledger entry of their own: everything in that cluster goes with it (drill-cluster).
        vitals = VitalSigns(encrypted, None).watch()
        try:
            vitals.await_baseline()
            ensure_namespace(encrypted, drill.namespace)
            _plant_and_read(drill, encrypted, drill.namespace, topology.control_plane, topology.etcd_members,
                            encrypted_by=provider, vitals=vitals)
        finally:
            windows = [i for i in drill.record.observations.get("injections", []) if i["kind"] == PlantedSecret.kind]
            vitals.await_after(windows)
            summary = vitals.finish(windows, covered={})
            drill.add_timelines({f"encrypted/{name}": tl for name, tl in vitals.timelines.items()})
        drill.observe("encrypted_cluster_vital_signs", summary)
        drill.measure("encrypted_cluster_vital_signs_flagged", len(summary["flagged"]),
                      detail=", ".join(f"{name}: {summary['signs'][name]['reason']}" for name in summary["flagged"])
                      or f"on {encrypted.name}: none of {', '.join(summary['signs'])} flagged")


def _plant_and_read(drill, cluster, ns: str, control_plane: list[str], members, encrypted_by: str | None,
                    vitals=None) -> None:
    """Plant the Secret in ``cluster``, read it back through the API and from every etcd member,
    then read its history after the deletion. ``encrypted_by``: the provider of the cluster's
    EncryptionConfiguration, or None for a cluster without one; ``vitals``: that cluster's own
    vital signs (:class:`harness.engine.vitals.DrillVitals`) when it is not the session's."""
    with drill.phase("read-config"):
        via = running_member_node(cluster, control_plane)
        apiserver = cluster.node_exec(via, ["cat", "/etc/kubernetes/manifests/kube-apiserver.yaml"],
                                      timeout_seconds=15).stdout
        # What the platform says about itself, beside what etcd holds: the flag, not its file.
        drill.observe("encryption_provider_config_flag", "--encryption-provider-config" in apiserver)
        drill.observe("etcd_members", [{"name": m.name, "client_urls": m.client_urls} for m in members])

    secret = PlantedSecret(cluster, ns, drill.params.get("secret_name", "kdrill-planted"))
    with drill.inject(secret):
        with drill.phase("read-back"):
            read = cluster.core.read_namespaced_secret(secret.name, ns, _request_timeout=10)
            returned = base64.b64decode((read.data or {}).get(DATA_KEY, ""))
            drill.measure("secret_reads_back_through_api", returned == secret.value,
                          detail=f"data[{DATA_KEY}] through the API: {value_digest(returned)} (written "
                                 f"{secret.digest})")

        with drill.phase("read-etcd"):
            stored = get_key(cluster, via, "https://127.0.0.1:2379", secret.etcd_key)
            if stored is None:
                for name in ("plaintext_in_etcd", "stored_without_encryption_prefix", "stored_with_encryption_prefix"):
                    if name in drill.expectations:
                        drill.expectations.error(name, f"etcd has no key {secret.etcd_key}")
            else:
                drill.observe("etcd_read", {"key": stored.key, "via_node": via, "mod_revision": stored.mod_revision,
                                            "stored_bytes": len(stored.value), "prefix": _prefix(stored.value),
                                            "protobuf_envelope": stored.value.startswith(PROTOBUF_PREFIX)})
                drill.measure("plaintext_in_etcd", secret.value in stored.value,
                              detail=f"etcdctl get {stored.key} on {via}: {len(stored.value)} bytes beginning "
                                     f"{_prefix(stored.value)!r}; the value's bytes "
                                     f"{'are' if secret.value in stored.value else 'are not'} among them")
                if encrypted_by is None:
                    drill.measure("stored_without_encryption_prefix", not stored.value.startswith(ENCRYPTED_PREFIX),
                                  detail=f"stored value begins {_prefix(stored.value)!r} (encrypted values begin "
                                         f"{ENCRYPTED_PREFIX.decode()!r})")
                else:
                    wanted = expected_prefix(encrypted_by)
                    drill.measure("stored_with_encryption_prefix", stored.value.startswith(wanted),
                                  detail=f"stored value begins {_prefix(stored.value)!r} (expected "
                                         f"{wanted.decode()!r})")

            if "members_holding_plaintext" in drill.expectations:
                # Each member's own copy (a serializable read answers from the member's local
                # store; a follower may apply the write a moment after the leader).
                holding = {}
                for member in members:
                    endpoint = member.client_urls[0]

                    def has_plaintext(endpoint=endpoint):
                        copy = get_key(cluster, via, endpoint, secret.etcd_key, serializable=True)
                        return copy is not None and secret.value in copy.value

                    holding[member.name] = wait_until(has_plaintext, 10, interval_seconds=0.5,
                                                      description=f"member {member.name}'s copy read").ok
                drill.measure("members_holding_plaintext", sum(holding.values()),
                              detail=", ".join(f"{name}: {'plaintext' if ok else 'not found'}"
                                               for name, ok in holding.items()))
        if vitals is not None:
            # As Drill.inject does for the session's: the Secret lives about a second, shorter than
            # the node probe's interval, so its window gets one sample of each sign first.
            vitals.await_samples(secret.injected_at, 1, 10.0, "vital signs sampled during the fault")
        revision = stored.mod_revision if stored is not None else None

    # The revert deleted the Secret (and verified the API answers 404): etcd's history still has it.
    with drill.phase("after-delete"):
        latest = get_key(cluster, via, "https://127.0.0.1:2379", secret.etcd_key)
        drill.observe("key_after_delete", "absent" if latest is None else f"present (mod_revision {latest.mod_revision})")
        if revision is None:
            drill.expectations.error("plaintext_in_history_after_delete", "the key was never read from etcd")
            return
        try:
            old = get_key(cluster, via, "https://127.0.0.1:2379", secret.etcd_key, revision=revision)
        except RevisionCompacted as exc:
            # kube-apiserver compacts every 5 minutes: one may fall between the write and this read.
            drill.expectations.error("plaintext_in_history_after_delete",
                                     f"compacted between the write and this read: {exc}")
            return
        in_history = old is not None and secret.value in old.value
        drill.observe("history_read", {"revision": revision, "found": old is not None,
                                       "prefix": None if old is None else _prefix(old.value)})
        if encrypted_by is None:
            # The claim is about a deleted Secret: the key must be gone at the latest revision.
            measured = latest is None and in_history
        elif old is None:
            drill.expectations.error("plaintext_in_history_after_delete",
                                     f"the key is not at revision {revision}: its history was not read")
            return
        else:
            measured = in_history
        drill.measure("plaintext_in_history_after_delete", measured,
                      detail=f"key {'absent' if latest is None else 'still present'} at the latest "
                             f"revision; at revision {revision}: "
                             + ("not found" if old is None else
                                f"{len(old.value)} bytes beginning {_prefix(old.value)!r}, "
                                f"{'the value in plaintext' if in_history else 'no plaintext'}"))
