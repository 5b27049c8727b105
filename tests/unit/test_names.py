"""Names that say what they do: `make engines` runs `hotpath build`; each exporter is named for the model it
builds; no exporter subclasses another model's exporter."""

import re
import tomllib

import pytest

from hotpath import paths, repository_build
from hotpath.errors import SpecError
from hotpath.exporters.registry import EXPORTERS
from hotpath.specs.spec import load_specs, spec_from_dict

SPECS = load_specs(paths.model_specs_dir())


def test_make_engines_runs_hotpath_build():
    makefile = (paths.ROOT / "Makefile").read_text()
    recipe = re.search(r"^engines:.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
    assert "$(HOTPATH) build" in recipe
    assert not re.search(r"^build:", makefile, re.M)   # build/ is the specs' folder: no target shadows it


@pytest.mark.parametrize("spec", [s for s in SPECS if s.hotpath.exporter], ids=lambda s: s.name)
def test_a_spec_names_its_own_exporter(spec):
    assert spec.hotpath.exporter == spec.name
    assert spec.hotpath.exporter in EXPORTERS


def test_every_exporter_builds_a_model_of_its_name():
    assert set(EXPORTERS) <= {s.name for s in SPECS}


def test_no_exporter_subclasses_another_models_exporter():
    for name, cls in EXPORTERS.items():
        others = [o for o in EXPORTERS.values() if o is not cls and issubclass(cls, o)]
        assert not others, f"{name}: {cls.__name__} subclasses {[o.__name__ for o in others]}"


def test_an_unknown_exporter_lists_the_known_ones(tmp_path, monkeypatch):
    data = tomllib.loads((paths.model_specs_dir() / "text_encoder.toml").read_text())
    data["hotpath"]["exporter"] = "text_encoderr"
    spec = spec_from_dict(data, "text_encoder")
    monkeypatch.setattr(repository_build, "load_specs", lambda *dirs: [spec])
    monkeypatch.setattr(repository_build, "validate_all", lambda specs: None)
    with pytest.raises(SpecError, match="unknown exporter 'text_encoderr' .known: .*text_encoder"):
        repository_build.build_repository(tmp_path)
