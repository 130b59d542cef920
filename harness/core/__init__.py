"""Core utilities: waiting, YAML loading, processes, files, time, the ledger, plug-in lookup. Imports nothing else of harness."""
