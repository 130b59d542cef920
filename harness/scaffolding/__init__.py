"""What a drill sets up beside its fault: its namespace, declared objects, registry, side cluster, node agent."""
