"""A local tritonserver: the real Triton 2.51 binary shipped in the nvidia-pytriton wheel.

One module per concept: `install` (finding the binary, its Python backend and environment),
`staging` (the servable copy of the repository, with the ORT substitution), `ports`, `process`
(one server process, `LocalTriton`) and `serve` (the `hotpath serve` loop).
"""
