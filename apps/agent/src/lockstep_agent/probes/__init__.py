"""Probes of the node the agent runs on: small adapters, each returning a typed result.

``files`` (sysfs, procfs, firmware and library directories), ``dkms`` (``dkms status``),
``nvml`` (NVIDIA's NVML bindings) and ``xid`` (the kernel log). ``node.probe_node`` runs them
all; a simulated node supplies the same ``NodeFacts`` from its model instead.
"""
