"""Exporters turn source weights into the files a model version directory holds.

Each exporter names the files and code its output depends on, so `hotpath build` can skip work
when none of them changed (see hotpath.specs.fingerprint). The registry (hotpath.exporters.registry)
maps a spec's exporter name to its class.
"""
