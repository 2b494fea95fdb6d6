"""The Kubernetes lab is the real thing (issue 55): kube-apiserver and etcd built from their Go modules, serving TLS
with a CA of the lab's own, authenticating tokens, and authorizing by RBAC, so that what the adapter may do is decided
by the server, not by the tests."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request

import pytest


def test_an_identity_may_do_what_its_role_binds_and_nothing_more(kube_lab, tmp_path):
    from kubernetes import client, config

    core = kube_lab.core
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="lab-rbac")))
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name="rbac-node1")))
    token = kube_lab.token_for("lab-rbac", "reader")
    reader = client.CoreV1Api(config.new_client_from_config(str(kube_lab.kubeconfig_with(token, tmp_path / "kc"))))
    with pytest.raises(client.ApiException) as refused:
        reader.list_node()
    assert refused.value.status == 403  # authenticated, not authorized: RBAC is on

    kube_lab.rbac.create_cluster_role(client.V1ClusterRole(
        metadata=client.V1ObjectMeta(name="lab-node-reader"),
        rules=[client.V1PolicyRule(api_groups=[""], resources=["nodes"], verbs=["get", "list"])]))
    kube_lab.rbac.create_cluster_role_binding(client.V1ClusterRoleBinding(
        metadata=client.V1ObjectMeta(name="lab-node-reader"),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="lab-node-reader"),
        subjects=[client.RbacV1Subject(kind="ServiceAccount", name="reader", namespace="lab-rbac")]))
    names = [n.metadata.name for n in _eventually(reader.list_node).items]
    assert "rbac-node1" in names
    with pytest.raises(client.ApiException) as still:
        reader.patch_node("rbac-node1", {"spec": {"unschedulable": True}})
    assert still.value.status == 403  # a role of get and list does not cordon


def test_the_server_speaks_tls_with_the_labs_own_ca_and_wants_a_token(kube_lab):
    url = kube_lab.api.configuration.host + "/api/v1/nodes"
    with pytest.raises(urllib.error.URLError) as untrusted:
        urllib.request.urlopen(url, timeout=10)  # the system's CAs do not know the lab's
    assert isinstance(untrusted.value.reason, ssl.SSLCertVerificationError)
    trusted = ssl.create_default_context(cafile=str(kube_lab.dir / "ca.crt"))
    with pytest.raises(urllib.error.HTTPError) as anonymous:
        urllib.request.urlopen(url, timeout=10, context=trusted)
    assert anonymous.value.code in (401, 403)  # no token: not allowed to read nodes


def _eventually(call, timeout: float = 10.0):
    """RBAC's authorizer learns a new binding from its informer, a moment after the write."""
    import time

    from kubernetes import client

    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except client.ApiException as exc:
            if exc.status != 403 or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
