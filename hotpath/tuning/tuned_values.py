"""Per-host tuned values: a build/deploy output beside the repository, keyed to the hardware it was measured on.

The committed specs (build/*.toml) hold one default per knob. `hotpath tune --quick` measures this
host and writes the knob values that beat the defaults into `tuned.json` in the work directory
(.hotpath/, git-ignored; in the container the cache volume), with this host's hardware key
(hotpath.tuning.hardware_key). When a server is staged (hotpath.server.staging), a file whose key equals
this host's overrides the defaults of the models it names; a foreign file (measured on other
hardware) is left unused and said so, with the command that retunes. Nothing here rewrites a spec.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hotpath import paths, settings
from hotpath.tuning.hardware_key import HardwareKey

logger = logging.getLogger(__name__)
FILE_NAME = "tuned.json"
RETUNE = "hotpath tune --quick"


def default_path(container: bool = False) -> Path:
    """tuned.json in the container's cache volume (HOTPATH_CACHE_DIR) or the checkout's work directory."""
    return Path(settings.cache_dir() if container else paths.work_dir()) / FILE_NAME


@dataclass
class TunedValues:
    hardware: HardwareKey
    models: dict[str, dict[str, Any]] = field(default_factory=dict)   # model -> knob -> value (differs from spec)
    measured_at: str = ""
    command: str = ""
    seconds: float = 0.0
    endpoints: dict[str, str] = field(default_factory=dict)           # endpoint -> start vs winner, in words

    def to_dict(self) -> dict:
        return {"hardware": {"digest": self.hardware.digest, **self.hardware.to_dict()},
                "models": {m: {k: list(v) if isinstance(v, tuple) else v for k, v in kn.items()}
                           for m, kn in self.models.items()},
                "measured_at": self.measured_at, "command": self.command, "seconds": round(self.seconds, 1),
                "endpoints": self.endpoints}

    @classmethod
    def from_dict(cls, d: dict) -> "TunedValues":
        models = {m: {k: tuple(v) if isinstance(v, list) else v for k, v in kn.items()}
                  for m, kn in d.get("models", {}).items()}
        return cls(HardwareKey.from_dict(d.get("hardware", {})), models, d.get("measured_at", ""),
                   d.get("command", ""), float(d.get("seconds", 0.0)), dict(d.get("endpoints", {})))

    def save(self, path: Path | None = None) -> Path:
        path = Path(path or default_path())
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        tmp.replace(path)    # a reader never sees half a file
        return path


def load(path: Path | None = None) -> TunedValues | None:
    """The tuned values at `path` (default: the work directory's), None when there are none or unreadable."""
    path = Path(path or default_path())
    try:
        return TunedValues.from_dict(json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        logger.warning(f"[tuned] {path}: unreadable ({exc}); serving the committed defaults")
        return None


@dataclass(frozen=True)
class Verdict:
    state: str                       # "none" | "match" | "foreign"
    message: str
    models: dict[str, dict[str, Any]] = field(default_factory=dict)   # what applies here ({} unless match)


def judge(tuned: TunedValues | None, here: HardwareKey, path: Path | str = "") -> Verdict:
    """Whether `tuned` fits this host, and the one line that says so."""
    if tuned is None:
        return Verdict("none", f"[tuned] no tuned values for this host ({here.describe()}, key {here.digest}); "
                               f"serving the committed defaults (build/*.toml). `{RETUNE}` tunes this host.")
    if tuned.hardware == here:
        changes = "; ".join(f"{m}: " + ", ".join(f"{k}={_show(v)}" for k, v in kn.items())
                            for m, kn in tuned.models.items()) or "the defaults won"
        return Verdict("match", f"[tuned] applying tuned values measured on this host ({tuned.measured_at}, key "
                                f"{here.digest}, {path}): {changes}", dict(tuned.models))
    return Verdict("foreign", f"[tuned] WARNING: tuned values in {path} are FOREIGN: measured on "
                              f"{tuned.hardware.describe()} (key {tuned.hardware.digest}), this host is "
                              f"{here.describe()} (key {here.digest}); differs in "
                              f"{'; '.join(here.differences(tuned.hardware))}. Serving the committed defaults "
                              f"instead; run `{RETUNE}` to tune this host.")


def for_this_host(path: Path | None = None, log=logger.info, here: HardwareKey | None = None) -> dict[str, dict]:
    """The knob overrides that apply on this host (logged either way); {} when none or foreign."""
    path = Path(path or default_path())
    verdict = judge(load(path), here or HardwareKey.detect(), path)
    log(verdict.message)
    return verdict.models


def with_tuned(config, knobs: dict[str, Any], log=logger.info):
    """A copy of a ModelConfig with `knobs` applied (names that are not knobs of this model are logged, skipped)."""
    from hotpath.tuning.knobs import BY_NAME, apply_knobs

    usable = {k: v for k, v in knobs.items() if k in BY_NAME and BY_NAME[k].applies(config)}
    if usable != knobs:
        log(f"[tuned] {config.name}: ignoring {sorted(set(knobs) - set(usable))} (not knobs of this model)")
    return apply_knobs(config, usable)


def link_with_config(model_dir: Path, dest: Path, config) -> None:
    """`dest`: `model_dir` with its own config.pbtxt (`config`) and every other entry a link."""
    from hotpath.specs.config_pbtxt import to_pbtxt

    dest.mkdir()
    (dest / "config.pbtxt").write_text(to_pbtxt(config))
    for f in model_dir.iterdir():
        if f.name != "config.pbtxt":
            (dest / f.name).symlink_to(f.resolve(), target_is_directory=f.is_dir())


def apply_to_served(served: Path, path: Path, log=logger.info) -> dict[str, dict]:
    """Container start: this host's tuned values (from `path`) over the assembled repository `served`, whose
    models are links into the image's read-only repository; returns what was applied."""
    from hotpath.specs.repository import read_config

    models = for_this_host(path, log)
    for model, knobs in models.items():
        entry = Path(served) / model
        if not entry.exists():
            log(f"[tuned] {model}: not in {served}; skipped")
            continue
        source = entry.resolve()
        config = with_tuned(read_config(source), knobs, log)
        if entry.is_symlink():
            entry.unlink()
            link_with_config(source, entry, config)
        else:   # a folder the start assembled (TensorRT fallback): its config may be a link into the image
            from hotpath.specs.config_pbtxt import to_pbtxt

            (entry / "config.pbtxt").unlink(missing_ok=True)
            (entry / "config.pbtxt").write_text(to_pbtxt(config))
    return models


def _show(v: Any) -> str:
    return str(list(v)) if isinstance(v, tuple) else str(v)


def stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def main(argv: list[str] | None = None) -> int:
    """`python3 -m hotpath.tuning.tuned_values --served DIR --file F`: the container's check and apply."""
    import argparse

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("--served", required=True, help="the repository tritonserver will serve (<cache>/repository)")
    p.add_argument("--file", default=None, help="tuned values (default <cache>/tuned.json)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    apply_to_served(Path(args.served), Path(args.file or default_path(container=True)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
