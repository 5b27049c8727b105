"""The wheel built from the checkout's files holds the product only: no rival server, no study (the lab, perf/,
stays in the checkout) and every subpackage the CLI and the container run."""

import shutil
import subprocess
import sys
import zipfile

from hotpath import paths

# The lab's rival servers and tools (perf/lab/compare/alternatives/): no module of the wheel has one of these names.
RIVALS = {"fastapi_app", "pytriton_app", "infinity_emb", "llama_cpp", "model_analyzer", "generation_fastapi",
          "side_by_side", "rivals"}


def test_the_wheel_holds_the_product_and_no_lab(tmp_path):
    """Built as a fresh clone would be: from the files git tracks or would add (not ignored), in a copy, so that
    setuptools' build/ and egg-info never land in the checkout (build/ holds the specs)."""
    tree = tmp_path / "clone"
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=paths.ROOT, check=True,
                            capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, listed):
        source = paths.ROOT / name
        if source.is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tree / name)
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                          "-w", str(tmp_path / "dist"), str(tree)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    wheel, = (tmp_path / "dist").glob("hotpath-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    modules = [n for n in names if n.endswith(".py")]
    assert {n.split("/")[0] for n in names} == {"hotpath", wheel.name.split("-py")[0] + ".dist-info"}, \
        "only the hotpath package (the lab's perf/ is not installed)"
    assert not [n for n in modules if {"compare", "studies"} & set(n.split("/")) or n.split("/")[-1][:-3] in RIVALS]
    for product in ("hotpath/cli.py", "hotpath/sweeps/gate.py", "hotpath/sweeps/measure/floor.py",
                    "hotpath/sweeps/tune/run.py", "hotpath/sweeps/explain/breakdown.py", "hotpath/stack/serve.py",
                    "hotpath/runtime/embedder.py", "hotpath/tensorrt/startup.py", "hotpath/health/__main__.py"):
        assert product in names, product
