"""Kubernetes objects and cluster providers (kind, an existing cluster, the node agent), health, workloads, images."""
