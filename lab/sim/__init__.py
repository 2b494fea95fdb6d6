"""The simulated supernode: topology, workload and physics, fault templates, scenarios, exporters.

Everything here runs on the same entity naming (docs/architecture.md §3) and writes the same recorded formats
(§8) the readers take, so a simulated trace replays exactly like a recorded one.
"""
