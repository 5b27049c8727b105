"""The doors study's CPU accounting: which part of a stack a process plays, and CPU per streamed token."""

import os
import subprocess
import sys
import time

from hotpath.sweeps.measure.host_load import read_proc
from perf.lab.compare.generation_doors import add_cpu, cpu_table, role


def test_role_names_each_part_of_the_stacks():
    assert role("python", "", os.getpid()) == "client"
    assert role("tritonserver", "tritonserver --model-repository /r", 2) == "tritonserver"
    assert role("triton_python_b", "triton_python_backend_stub m.py", 3) == "Triton stub"
    assert role("VLLM::EngineCor", "VLLM::EngineCore", 4) == "vLLM EngineCore"
    assert role("VLLM::Worker", "VLLM::Worker", 4) == "vLLM worker (forward)"
    assert role("python", "python /r/hotpath/runtime/llm/engine_process.py {}", 5) == \
        "engine process (AsyncLLM)"
    assert role("python", "python -m hotpath.openai_api --grpc-url x", 6) == "hotpath OpenAI API"
    assert role("python", "python -m vllm.entrypoints.openai.api_server", 7) == \
        "vLLM API server (AsyncLLM)"
    assert role("bash", "bash", 8) == "other"


def test_a_busy_process_and_this_one_are_counted_under_their_roles():
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass\ntime.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", spin, "engine_process.py"])
    try:
        before = read_proc()
        t = time.process_time()
        while time.process_time() - t < 0.2:   # this process: the client
            pass
        time.sleep(0.6)                         # the child spins its 0.5 s meanwhile (2 cores; on a busy host too)
        deadline = time.monotonic() + 20
        point = {}
        while point.get("engine process (AsyncLLM)", 0.0) < 0.3 and time.monotonic() < deadline:
            time.sleep(0.2)
            point = {}
            add_cpu(point, before, read_proc())
    finally:
        child.kill()
        child.wait()
    assert point["client"] >= 0.15 and point["engine process (AsyncLLM)"] >= 0.3, point


def test_cpu_table_divides_by_the_tokens_of_each_point():
    cpu = {("hotpath grpc", 8): {"client": 0.1, "tritonserver": 0.2, "vLLM EngineCore": 1.0, "other": 0.05},
           ("vLLM server", 8): {"client": 0.1, "vLLM EngineCore": 0.9}}
    lines = cpu_table(cpu, {("hotpath grpc", 8): 100, ("vLLM server", 8): 50})
    header = [c.strip() for c in lines[1].strip("|").split("|")]
    grpc = dict(zip(header, [c.strip() for c in lines[3].strip("|").split("|")]))
    vllm = dict(zip(header, [c.strip() for c in lines[4].strip("|").split("|")]))
    assert grpc["tritonserver"] == "2.00" and grpc["vLLM EngineCore"] == "10.00" and grpc["total"] == "13.50"
    assert grpc["server side (no client)"] == "12.00"
    assert vllm["vLLM EngineCore"] == "18.00" and vllm["tritonserver"] == "0.00"
    assert cpu_table(cpu, {}) == []
