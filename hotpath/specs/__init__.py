"""Specs and the repository they build: spec files, build options, config.pbtxt, fingerprints, `hotpath build`."""
