"""kdrill: failure drills for Kubernetes platforms, run on real kind clusters."""

__version__ = "0.1.0"
