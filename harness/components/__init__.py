"""Component helpers: what kdrill knows about the platform components a drill breaks or watches.

The rest of ``harness/`` follows the path a drill takes (scenario -> runner -> cluster -> probes
-> fault -> measures -> evidence). The modules here are not on that path; each is about one
component of the cluster under test and is used from several places on it (faults, probes,
drills, the topology record):

* :mod:`harness.components.etcd`: etcd as etcd reports it (members, leader, health, status,
  quorum arithmetic), through ``etcdctl`` in the static pod.
* :mod:`harness.components.static_pods`: the kubeadm control plane's static pods and the node's
  kubelet (stop and keep stopped, start again, read the kubelet's journal).
* :mod:`harness.components.dns`: CoreDNS (its metrics, its Corefile) and how a pod's resolver
  expands names.
* :mod:`harness.components.registry`: the local OCI registry container beside a kind cluster and
  the nodes' containerd pointed at it.
* :mod:`harness.components.webhook`: a validating admission webhook's TLS material and manifests.
* :mod:`harness.components.admission`: the cluster's admission webhook configurations, and which
  writes the API server sends to which webhook (predicted from the configuration alone).

Import a module, not this package: ``from harness.components import etcd`` or
``from harness.components.etcd import member_healthy``. This ``__init__`` imports nothing, so
importing one component does not pull in the others' dependencies.
"""
