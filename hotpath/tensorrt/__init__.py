"""TensorRT plans: one home, in two layers; a build calls down, never back up.

- `hotpath.tensorrt.plans` (toolchain, `hotpath build`): a spec's `[hotpath.tensorrt]` table -> options
  (`options`, checked against the tokenizers feeding the model: `feeders`), profiles, the Recipe, the plan
  config (`plan_config`), the folded ONNX (`sanitize`), INT8 calibration inputs, the engines step (`step`)
  and `hotpath build --check` (`audit`). Only hotpath.repository_build and the CLI enter it, and only for
  a spec with a `[hotpath.tensorrt]` table.
- the core (these modules; the container runs them at start, hotpath.tensorrt.startup): what a plan is
  built from (`recipe`), what it was built for (`manifest`), whether it fits a GPU (`compat`, `device`,
  `inventory`), building one (`builder`, needs TensorRT) and checking it (`parity`). Light at import
  (numpy, polygraphy, ONNX Runtime and TensorRT only when a plan is built or compared); it never imports
  the build layer, the specs or the repository build (tests/unit/test_tensorrt_layers.py).
"""
