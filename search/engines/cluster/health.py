"""Cluster health as readiness: what ``/v1/ready`` answers for the cluster engine and store.

Green: every copy of every flysift index is assigned, ``ready``. Yellow: every primary is, some replica is not (a node
was lost or is rejoining): searches and writes work, but losing one more node may lose answers, ``warning`` (ready,
with the reason). Red (a primary unassigned: some documents cannot be read or written), no elected master, or no
node answering: ``not_ready``. Only the indices of the configured prefix count, so another tenant's red index does not
take flysift out of a load balancer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from search.core.checks import Check, fail, ok, warn
from search.core.errors import FlysiftError
from search.engines.cluster.transport import Transport

Readiness = Literal["ready", "warning", "not_ready"]


@dataclass(frozen=True)
class ClusterHealth:
    """``status``: ready, warning or not_ready; ``cluster_status``: green, yellow, red, or None when nothing answered;
    ``message``: one line for a person; ``details``: the cluster's counts (nodes, shards) for programs."""

    status: Readiness
    cluster_status: str | None
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return self.status != "not_ready"

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "cluster_status": self.cluster_status, "message": self.message,
                **self.details}


_COUNTS = ("number_of_nodes", "number_of_data_nodes", "active_primary_shards", "active_shards",
           "relocating_shards", "initializing_shards", "unassigned_shards", "delayed_unassigned_shards")


def cluster_health(transport: Transport, prefix: str) -> ClusterHealth:
    """The readiness of the indices ``<prefix>-*`` (see the module docstring); never raises for a sick cluster."""
    try:
        res = transport.request("GET", f"/_cluster/health/{prefix}-*", params={"expand_wildcards": "open"},
                                what="cluster health")   # (not the closed indices a restore kept: they serve nothing)
    except FlysiftError as e:
        return ClusterHealth("not_ready", None, f"the search cluster does not answer its health: {e.message}"[:500],
                             {"error": e.code})
    status = res.get("status")
    details = {k: res[k] for k in _COUNTS if k in res}
    nodes = details.get("number_of_nodes", "?")
    if status == "green":
        return ClusterHealth("ready", status, f"cluster green: {nodes} node(s), every copy assigned", details)
    if status == "yellow":
        missing = details.get("unassigned_shards", 0) + details.get("initializing_shards", 0)
        return ClusterHealth("warning", status, f"cluster yellow: {nodes} node(s), {missing} replica copies not "
                             "assigned yet (a node was lost or is rejoining); answers continue, but losing another "
                             "node may lose some", details)
    return ClusterHealth("not_ready", status, f"cluster {status}: some primary copies of flysift's indices are not "
                         f"assigned ({details.get('unassigned_shards', '?')} shards unassigned, {nodes} node(s)); "
                         "some papers or sessions cannot be read or written", details)


def as_checks(health: ClusterHealth, flavour: str) -> list[Check]:
    """``health`` as readiness checks (``search.ops.readiness``): green ok, yellow a warning (answers continue), red
    or no answer a failure."""
    message = f"{flavour}: {health.message}"
    if health.status == "ready":
        return [ok("cluster", message)]
    if health.status == "warning":
        return [warn("cluster", message, data=health.to_dict())]
    return [fail("cluster", message, data=health.to_dict(),
                 fix="check the cluster's nodes and FLYSIFT_CLUSTER_URL; searches answer 503 meanwhile")]
