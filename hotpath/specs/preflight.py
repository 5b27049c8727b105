"""Check a model repository before Triton starts on it: configs parse, model files exist.

Run at container start (docker/entrypoint.sh) and by `hotpath serve`, so a missing ONNX file
or a broken config fails fast with the model named, instead of a half-loaded server.
"""

from __future__ import annotations

import sys
from pathlib import Path

# What a version directory must hold, per backend/platform.
_REQUIRED = {
    "onnxruntime": "model.onnx",
    "onnxruntime_onnx": "model.onnx",
    "tensorrt": "model.plan",
    "tensorrt_plan": "model.plan",
    "python": "model.py",
}


def check_repository(repository: Path) -> list[str]:
    """Problems found in `repository` (empty when it is ready to serve)."""
    from hotpath.specs.repository import CONFIG_FILE, ConfigError, read_config

    repository = Path(repository)
    if not repository.is_dir():
        return [f"{repository}: not a directory"]
    problems, configs = [], {}
    for model_dir in sorted(p for p in repository.iterdir() if p.is_dir()):
        if not (model_dir / CONFIG_FILE).exists():
            problems.append(f"{model_dir.name}: no {CONFIG_FILE}")
            continue
        try:
            config = read_config(model_dir)
        except ConfigError as exc:
            problems.append(f"{model_dir.name}: {CONFIG_FILE} does not parse: {exc.reason}")
            continue
        configs[model_dir.name] = config
        versions = [v for v in model_dir.iterdir() if v.is_dir() and v.name.isdigit()]
        if not versions:
            problems.append(f"{model_dir.name}: no version directory (e.g. {model_dir.name}/1/)")
        kind = config.platform or config.backend
        required = config.default_model_filename or _REQUIRED.get(kind)
        if kind == "python":
            required = "model.py"
        for version in versions:
            if required and not (version / required).exists():
                hint = " (run `make engines`)" if required.endswith((".onnx", ".plan")) else ""
                problems.append(f"{model_dir.name}: {version.name}/{required} is missing{hint}")
        for warmup in config.model_warmup:  # Triton fails the model's load on a missing sample file
            for name, sample in warmup.inputs.items():
                if sample.input_data_file and not (model_dir / "warmup" / sample.input_data_file).is_file():
                    problems.append(f"{model_dir.name}: warmup/{sample.input_data_file} (model_warmup "
                                    f"'{warmup.name}', input {name}) is missing (run `make engines`)")
    for name, config in configs.items():
        for step in config.ensemble_scheduling.step:
            if step.model_name not in configs:
                problems.append(f"{name}: ensemble step model '{step.model_name}' is not in the repository")
    return problems


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    repository = Path(args[0] if args else "/models")
    problems = check_repository(repository)
    for p in problems:
        print(f"[preflight] {p}", file=sys.stderr)
    if not problems:
        print(f"[preflight] {repository}: ready", flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
