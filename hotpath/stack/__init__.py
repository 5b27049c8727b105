"""The whole serving stack in one process tree: tritonserver, the OpenAI API and the gateway (`hotpath serve`)."""
