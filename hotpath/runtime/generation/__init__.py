"""Streaming text generation with continuous batching, testable without Triton.

`Engine` runs one generation loop over an exported decoder step (`Decoder`) whose KV cache lives
in a preallocated `KVPool`; the text_generation Python backend is a thin adapter over it.
"""
