"""Host mode (issue 24): one server.properties, N complete brokers on one server, one per group of cores and
disks. ``plan`` derives each broker's id, ports, log dirs and cores (pure data); ``supervisor`` runs them."""
from kbroker.host.plan import HostPlan, HostPlanError, ProcessPlan, Topology, plan_host

__all__ = ["HostPlan", "HostPlanError", "ProcessPlan", "Topology", "plan_host"]
