import pytest

from playbooks.hostlist import expand


@pytest.mark.parametrize("text,names", [
    ("node1", ("node1",)),
    ("node[1-3]", ("node1", "node2", "node3")),
    ("node[1-2,7],gpu-a[08-10]", ("node1", "node2", "node7", "gpu-a08", "gpu-a09", "gpu-a10")),
    ("sn01-b[07-08]", ("sn01-b07", "sn01-b08")),
    ("r[1-2]n[1-2]", ("r1n1", "r1n2", "r2n1", "r2n2")),
    ("", ()), (None, ()), ("(null)", ()),
])
def test_expand(text, names):
    assert expand(text) == names


@pytest.mark.parametrize("bad", ["node[1-", "node]1[", "node[3-1]", "node[a-b]"])
def test_malformed(bad):
    with pytest.raises(ValueError, match="host list"):
        expand(bad)
