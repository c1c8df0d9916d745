"""Discovery's choices on canned nodes: node type, count, GPUs and EFA, each with its source
(the real discovery against the API server runs in tests/integration/suites/test_harness_cluster.py)."""

from __future__ import annotations

import pytest

from harness.config.settings import Origin, Source, properties, resolve
from harness.config.topology import NodeInfo, Topology
from harness.errors import ConfigError
from harness.framework.cli import parse_args
from harness.setup.discovery import _efa, _gpus, select_nodes


def cfg_for(env: dict[str, str] | None = None, argv: list[str] | None = None):
    return resolve(parse_args(argv or []), env or {})


def node(name: str, kind: str = "p4d.24xlarge", gpus: int = 8, efa: int = 4, ready: bool = True) -> NodeInfo:
    return NodeInfo(name, kind, gpus, efa, ready)


def test_the_single_type_present_and_all_its_ready_nodes_are_chosen():
    selection = select_nodes([node("b"), node("a"), node("c", ready=False)], cfg_for())
    assert selection.node_type == "p4d.24xlarge" and selection.count == 2
    assert [n.name for n in selection.ready] == ["a", "b"]
    assert selection.origins["node_type"] == Origin(Source.DISCOVERED, "node.kubernetes.io/instance-type")
    assert selection.origins["node_count"] == Origin(
        Source.DISCOVERED, "Ready, schedulable p4d.24xlarge nodes: 2 of the 3 of the type")
    assert [n.name for n in selection.of_type] == ["a", "b", "c"]  # the NotReady one is counted


def test_mixed_types_need_node_type_which_keeps_its_source():
    nodes = [node("a"), node("b", kind="p5.48xlarge")]
    with pytest.raises(ConfigError, match="Node types are not the same"):
        select_nodes(nodes, cfg_for())
    selection = select_nodes(nodes, cfg_for(argv=["--nodeType=p5.48xlarge"]))
    assert [n.name for n in selection.ready] == ["b"]
    assert selection.origins["node_type"] == Origin(Source.FLAG, "--nodeType")


def test_node_count_above_the_ready_nodes_names_them():
    with pytest.raises(ConfigError, match="NODE_COUNT=3 but only 1 Ready p4d.24xlarge nodes: a"):
        select_nodes([node("a")], cfg_for({"NODE_COUNT": "3"}))


def test_efa_from_the_table_or_the_most_advertised_never_the_fewest():
    nodes = [node("a", efa=4), node("b", efa=2)]
    count, origin = _efa(cfg_for(), "p4d", nodes)  # not in the table: the most any node advertises
    assert count == 4 and origin.source is Source.DISCOVERED and "the most any of the 2 p4d nodes" in origin.detail
    count, origin = _efa(cfg_for(), "p5.48xlarge", [node("a", efa=32), node("b", efa=30)])
    assert (count, origin.source) == (32, Source.DERIVED) and "p5.48xlarge table" in origin.detail
    assert _efa(cfg_for(), "p5.48xlarge", [node("a", efa=0)]) == (
        0, Origin(Source.DISCOVERED, "no node advertises vpc.amazonaws.com/efa"))


def test_efa_from_the_setting_or_none():
    nodes = [node("a", efa=4), node("b", efa=2)]
    # --efaEnabled=false is upstream's default: nothing judged about EFA, the nodes' devices still used
    assert _efa(cfg_for(argv=["--efaEnabled=false"]), "p4d", nodes)[0] == 4
    assert _efa(cfg_for({"EFA_PER_NODE": "0"}), "p4d", nodes) == (0, Origin(Source.ENV, "EFA_PER_NODE"))
    assert _efa(cfg_for({"EFA_PER_NODE": "1"}), "p4d", nodes) == (1, Origin(Source.ENV, "EFA_PER_NODE"))
    with pytest.raises(ConfigError, match="EFA_PER_NODE=3 but the p4d nodes advertise 2"):
        _efa(cfg_for({"EFA_PER_NODE": "3"}), "p4d", nodes)
    with pytest.raises(ConfigError, match="--efaEnabled=true but no p4d node advertises"):
        _efa(cfg_for(argv=["--efaEnabled"]), "p4d", [node("a", efa=0)])


def test_topology_shows_in_the_properties_under_the_settings_names():
    topology = Topology("kwok-cpu", (node("a"), node("b")), 1, 0,
                        {"node_type": Origin(Source.DISCOVERED, "node.kubernetes.io/instance-type"),
                         "node_count": Origin(Source.ENV, "NODE_COUNT"),
                         "gpus_per_node": Origin(Source.DERIVED, "one process per node with ACCELERATOR=cpu"),
                         "efa_per_node": Origin(Source.DISCOVERED, "vpc.amazonaws.com/efa capacity")})
    props = properties({**cfg_for({"NODE_COUNT": "2"}).resolved(), **topology.resolved()})
    assert props["config.node_type"] == "kwok-cpu"
    assert props["config.node_type.source"] == "discovered: node.kubernetes.io/instance-type"
    assert (props["config.node_count"], props["config.node_count.source"]) == ("2", "env: NODE_COUNT")
    assert props["config.gpus_per_node.source"] == "derived: one process per node with ACCELERATOR=cpu"
    assert topology.node_names == ("a", "b") and topology.node_count == 2


def test_gpus_per_node_is_what_the_type_should_have_not_the_fewest(monkeypatch):
    """8 and 7 advertised: a p4d.24xlarge should have 8 (the table); an unknown type the most seen."""
    monkeypatch.setattr("harness.setup.discovery.wait_for", lambda *a, **k: None)
    for kind, origin in (("p4d.24xlarge", "p4d.24xlarge table"), ("custom.8gpu", "the most any of the 2")):
        nodes = [node("a", kind, gpus=8), node("b", kind, gpus=7)]
        selection = select_nodes(nodes, cfg_for())
        usable, gpus, source = _gpus(None, cfg_for({"ACCELERATOR": "nvidia"}), selection, None)
        assert gpus == 8 and origin in source.detail, source
        assert [n.name for n in usable] == ["a", "b"]  # the short node stays in: TestGPUCapacity names it
    _, gpus, source = _gpus(None, cfg_for({"GPUS_PER_NODE": "4"}), select_nodes(nodes, cfg_for()), None)
    assert (gpus, source) == (4, Origin(Source.ENV, "GPUS_PER_NODE"))  # the setting wins
