"""Code that runs inside Triton's Python backends: backend helpers, tokenization, image decoding, the ORT runner.

Kept apart from the toolchain so the production image installs this subpackage alone; it imports nothing
from the rest of hotpath.
"""
