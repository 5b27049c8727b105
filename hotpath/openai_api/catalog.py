"""Which repository endpoints the API serves, under which names, read from the repository's configs.

- embedding: an endpoint with one TYPE_STRING input and an `EMBEDDING` output (text_embedding,
  text_embedding_exact). Its limits come from the step that tokenizes (the model whose parameters name a
  `tokenizer_file`): `max_length` (the context length), `max_text_bytes`, `max_text_chars`.
- generation: a decoupled endpoint with the vLLM-backend tensors (`text_input`, and `messages` for chat;
  see hotpath.openai_api.generation). Its context length: the `max_model_len` or `max_context` parameter.

Model names are the endpoint names; `aliases` ({alias: endpoint}) adds another name for one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from hotpath.errors import HotpathError
from hotpath.specs.repository import Repository

OWNER = "hotpath"


@dataclass(frozen=True)
class Tokenizer:
    """The tokenizer an embedding endpoint runs: its file and the settings the model applies."""

    path: Path
    max_length: int


@dataclass(frozen=True)
class ServedModel:
    id: str                      # the name clients send as `model`
    endpoint: str                # the Triton model it calls
    kind: str                    # "embedding" | "generation"
    context_length: int | None
    max_batch_size: int = 1
    dimensions: int | None = None
    tokenizer: Tokenizer | None = None
    max_text_bytes: int | None = None
    max_text_chars: int | None = None
    chat: bool = False           # takes `messages` (chat template inside the model)
    created: int = 0
    export: Path | None = None   # generation: the exported model directory (tokenizer.json, chat template)

    def card(self) -> dict:
        """The /v1/models entry."""
        return {"id": self.id, "object": "model", "created": self.created, "owned_by": OWNER,
                "context_length": self.context_length, "max_model_len": self.context_length,
                "type": self.kind}


def _param(config: mc.ModelConfig, name: str) -> str | None:
    return config.parameters[name].string_value if name in config.parameters else None


def _int_param(config: mc.ModelConfig, *names: str) -> int | None:
    for name in names:
        if (value := _param(config, name)) and value.strip().isdigit():
            return int(value)
    return None


def _version_dir(model_dir: Path) -> Path:
    versions = sorted((p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
    if not versions:
        raise HotpathError(f"{model_dir}: no version directory")
    return versions[-1]


def _embedding(repo: Repository, name: str, config: mc.ModelConfig) -> ServedModel | None:
    if not any(o.name == "EMBEDDING" for o in config.output) or len(config.input) != 1 \
            or config.input[0].data_type != mc.TYPE_STRING:
        return None
    configs = repo.configs()
    steps = [s.model_name for s in config.ensemble_scheduling.step] or [name]
    for step in steps:
        step_config = configs[step]
        if (file := _param(step_config, "tokenizer_file")) is None:
            continue
        max_length = _int_param(step_config, "max_length")
        if max_length is None:
            raise HotpathError(f"{step}: a tokenizer_file without max_length")
        dims = next(o for o in config.output if o.name == "EMBEDDING").dims
        return ServedModel(name, name, "embedding", max_length, max(config.max_batch_size, 1),
                           int(dims[-1]), Tokenizer(_version_dir(repo.path / step) / file, max_length),
                           _int_param(step_config, "max_text_bytes"), _int_param(step_config, "max_text_chars"))
    return None   # no step tokenizes: tokens could not be counted, so it is not served


def _generation(repo: Repository, name: str, config: mc.ModelConfig) -> ServedModel | None:
    inputs = {i.name for i in config.input}
    if not config.model_transaction_policy.decoupled or "text_input" not in inputs:
        return None
    export = None
    try:
        candidate = _version_dir(repo.path / name) / "export"
        export = candidate if (candidate / "tokenizer.json").is_file() else None
    except (HotpathError, OSError):
        pass
    return ServedModel(name, name, "generation", _int_param(config, "max_model_len", "max_context"),
                       chat="messages" in inputs, export=export)


def served_models(repository: Path, aliases: dict[str, str] | None = None) -> dict[str, ServedModel]:
    """{name clients send: ServedModel}, the endpoint names first, then the aliases."""
    repo = Repository(repository)
    configs = repo.configs()
    served: dict[str, ServedModel] = {}
    for endpoint in repo.endpoints():
        config = configs[endpoint.name]
        model = _embedding(repo, endpoint.name, config) or _generation(repo, endpoint.name, config)
        if model:
            served[model.id] = model
    for alias, endpoint in (aliases or {}).items():
        if endpoint not in served:
            raise HotpathError(f"alias {alias!r}: no served endpoint {endpoint!r} (served: {', '.join(served)})")
        if alias in served:
            raise HotpathError(f"alias {alias!r} is already a model name")
        served[alias] = replace(served[endpoint], id=alias)
    return served


def parse_aliases(items: list[str]) -> dict[str, str]:
    """["alias=endpoint", ...] -> {alias: endpoint}."""
    out = {}
    for item in items:
        alias, sep, endpoint = item.partition("=")
        if not sep or not alias or not endpoint:
            raise HotpathError(f"alias {item!r}: expected ALIAS=ENDPOINT")
        out[alias] = endpoint
    return out
