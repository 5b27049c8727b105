"""text_generation's engine: vLLM in a child process of its own environment, driven from the Triton stub.

settings        the spec's [parameters] -> engine settings (validated at build time and at load)
request         a request's tensors and sampling_parameters JSON -> a checked request (INVALID_ARGUMENT)
engine_process  the child (runs under the vLLM venv's Python): AsyncLLM behind JSON lines on pipes
engine_client   the stub's side: starts the child, sends requests, routes its replies per request
metrics         the engine's statistics as Triton custom metrics (pb_utils.MetricFamily)
"""
