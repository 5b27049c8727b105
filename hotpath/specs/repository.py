"""The model repository as Triton reads it: each model's config.pbtxt, and the endpoints clients call.

The one parser of config.pbtxt files (hotpath.specs.config_pbtxt writes them through it). Runs inside the
production image (preflight, TensorRT start-up, the health probe), so it needs only protobuf,
tritonclient's model_config_pb2 and the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from hotpath.errors import ConfigError, HotpathError

CONFIG_FILE = "config.pbtxt"


class ConfigParseError(ConfigError):
    """A model's config file does not parse; names the model and the file."""

    def __init__(self, model: str, path: Path, reason: str):
        self.model, self.path, self.reason = model, path, reason
        super().__init__(f"model '{model}': {path} does not parse: {reason}")


def parse_pbtxt(text: str) -> mc.ModelConfig:
    """Parse config.pbtxt text into a ModelConfig message."""
    return text_format.Parse(text, mc.ModelConfig())


def config_file(model_dir: Path, config_name: str | None = None) -> Path:
    """The file Triton loads for a model: config.pbtxt, or configs/<name>.pbtxt with --model-config-name."""
    return Path(model_dir) / (f"configs/{config_name}.pbtxt" if config_name else CONFIG_FILE)


def read_config(model_dir: Path, config_name: str | None = None) -> mc.ModelConfig:
    """Read a model's config (see `config_file`); ConfigError names the model and file when it does not parse."""
    path = config_file(model_dir, config_name)
    try:
        return parse_pbtxt(path.read_text())
    except text_format.ParseError as exc:
        raise ConfigParseError(Path(model_dir).name, path, str(exc)) from exc


def instance_count(config: mc.ModelConfig) -> int:
    """Model instances a config asks for (a group without a count has one; no group: one, as Triton
    gives a CPU model)."""
    return sum(max(group.count, 1) for group in config.instance_group) or 1


@dataclass(frozen=True)
class Input:
    name: str
    data_type: str           # Triton's name, e.g. "TYPE_STRING"
    dims: tuple[int, ...]    # without the batch dimension; -1 is variable


@dataclass(frozen=True)
class Endpoint:
    """A model as a client calls it."""
    name: str
    steps: tuple[str, ...]       # the ensemble's steps in order; (name,) for a plain model
    inputs: tuple[Input, ...]
    instances: tuple[int, ...]   # model instances of each step, in the order of `steps`
    response_cache: bool         # on: Triton publishes no request-latency summary for the endpoint

    @property
    def models(self) -> tuple[str, ...]:
        """The endpoint and its steps, each once."""
        return tuple(dict.fromkeys((self.name, *self.steps)))


class Repository:
    """A Triton model repository: one directory per model holding its config.pbtxt."""

    def __init__(self, path: Path | None = None):
        if path is None:   # toolchain callers only: the container passes the path it serves
            from hotpath import paths

            path = paths.model_repository()
        self.path = Path(path)
        self._configs: dict[str, mc.ModelConfig] | None = None

    def model_dirs(self) -> list[Path]:
        """Every model's directory (one holding a config.pbtxt), by name."""
        return sorted(p for p in self.path.iterdir() if (p / CONFIG_FILE).is_file())

    def configs(self) -> dict[str, mc.ModelConfig]:
        """Every model's config, by model name (its directory's, as Triton names it); read once."""
        if self._configs is None:
            self._configs = {d.name: read_config(d) for d in self.model_dirs()}
        return self._configs

    def endpoint(self, name: str) -> Endpoint:
        """One model as a client calls it: its steps, inputs, instances and response cache."""
        configs = self.configs()
        if name not in configs:
            raise HotpathError(f"no model '{name}' in {self.path}")
        config = configs[name]
        steps = tuple(s.model_name for s in config.ensemble_scheduling.step) or (name,)
        missing = [s for s in steps if s not in configs]
        if missing:
            raise HotpathError(f"{name}: ensemble step model(s) {', '.join(missing)} not in {self.path}")
        inputs = tuple(Input(t.name, mc.DataType.Name(t.data_type), tuple(t.dims)) for t in config.input)
        return Endpoint(name, steps, inputs, tuple(instance_count(configs[s]) for s in steps),
                        config.response_cache.enable)

    def endpoints(self) -> list[Endpoint]:
        """The models a client calls: those that are no ensemble's step, by name."""
        configs = self.configs()
        steps = {s.model_name for c in configs.values() for s in c.ensemble_scheduling.step}
        return [self.endpoint(name) for name in configs if name not in steps]
