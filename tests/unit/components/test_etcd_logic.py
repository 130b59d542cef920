"""harness.components.etcd over a faked node channel: what a read-only listing does when its exec
ends with no exit status."""

def test_an_etcd_listing_whose_exec_closed_with_no_status_is_asked_once_more():
    """Through the node agent, an exec whose API server restarted ends with no exit status (-1):
    the read-only listing is asked again; a real failure is still raised."""
    import subprocess

    import pytest

    from harness.components.etcd import etcd_container_id
    from harness.kube.providers import ProviderError

    class Channel:
        def __init__(self, codes):
            self.codes, self.calls = list(codes), 0

        def node_exec(self, node, command, **kwargs):
            self.calls += 1
            code = self.codes.pop(0)
            return subprocess.CompletedProcess(command, code, "abc123\n" if code == 0 else "", "")

    once_more = Channel([-1, 0])
    assert etcd_container_id(once_more, "cp1") == "abc123" and once_more.calls == 2
    with pytest.raises(ProviderError, match="exited -1"):
        etcd_container_id(Channel([-1, -1]), "cp1")
    refused = Channel([1])
    with pytest.raises(ProviderError, match="exited 1"):
        etcd_container_id(refused, "cp1")
    assert refused.calls == 1
