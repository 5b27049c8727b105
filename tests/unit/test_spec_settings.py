"""A spec's [hotpath] and [parameters] tables are parsed once into typed objects (hotpath.specs.build_options,
hotpath.runtime.parameters): one default per key, and a bad value or an unknown key is a SpecError naming the
spec file and the key. The served models read their config with the same classes."""

import copy

import pytest

from hotpath import paths
from hotpath.errors import SpecError
from hotpath.runtime.llm.settings import from_parameters
from hotpath.runtime.parameters import (
    MAX_LENGTH,
    EmbedderParameters,
    ParameterError,
    RetrievalParameters,
    TokenizerParameters,
)
from hotpath.specs.build_options import BuildOptions
from hotpath.specs.repository import read_config
from hotpath.specs.spec import load_spec, load_specs, parameter_class, spec_from_dict

SPECS = {s.name: s for s in load_specs(paths.model_specs_dir(), paths.ensemble_specs_dir())}


def _changed(name, edit):
    spec = SPECS[name]
    data = copy.deepcopy(spec.raw)
    edit(data)
    return lambda: spec_from_dict(data, spec.name, spec.source)


@pytest.mark.parametrize("name, edit, field", [
    ("tokenizer", lambda d: d["parameters"].update(max_lenght=128), "parameters.max_lenght"),
    ("tokenizer", lambda d: d["parameters"].update(max_length="many"), "parameters.max_length"),
    ("tokenizer", lambda d: d["parameters"].update(pad_to_multiple_of=48), "parameters.pad_to_multiple_of"),
    ("sentence_embedder", lambda d: d["parameters"].update(spin_duration_us=-1), "parameters.spin_duration_us"),
    ("retrieval", lambda d: d["parameters"].update(default_k=500), "parameters.default_k"),
    ("image_preprocess", lambda d: d["parameters"].update(fast_jpeg="maybe"), "parameters.fast_jpeg"),
    ("text_encoder", lambda d: d["parameters"].update(intra_op_threads=2), "parameters.intra_op_threads"),
    ("text_generation", lambda d: d["parameters"].update(max_num_seq=4), "parameters.max_num_seq"),
    ("text_encoder", lambda d: d["hotpath"].update(opset="17"), "hotpath.opset"),
    ("sentence_embedder", lambda d: d["hotpath"].update(assets="tokenizer.json"), "hotpath.assets"),
    ("sentence_embedder", lambda d: d["hotpath"].update(index={}), "hotpath.index.corpus"),   # required keys
    ("retrieval", lambda d: d["hotpath"]["index"].pop("M"), "hotpath.index.M"),
    ("retrieval", lambda d: d["hotpath"]["index"].update(M=16.5), "hotpath.index.M"),
    ("retrieval", lambda d: d["hotpath"]["index"].update(corpus="wikipedia"), "hotpath.index.corpus"),
    ("retrieval", lambda d: d["hotpath"]["index"].update(efsearch=10), "hotpath.index.efsearch"),
    ("image_classifier", lambda d: d["hotpath"].update(index={}), "hotpath.index"),   # not an onnx key
])
def test_a_bad_value_or_an_unknown_key_names_the_spec_file_and_the_key(name, edit, field):
    with pytest.raises(SpecError) as exc:
        _changed(name, edit)()
    assert exc.value.field.startswith(field), exc.value
    assert str(exc.value).startswith(str(SPECS[name].source))


def test_each_model_gets_its_own_typed_objects():
    assert all(isinstance(s.hotpath, BuildOptions) for s in SPECS.values())
    assert type(SPECS["tokenizer"].parameters) is TokenizerParameters
    assert type(SPECS["sentence_embedder"].parameters) is EmbedderParameters
    assert type(SPECS["retrieval"].parameters) is RetrievalParameters
    assert SPECS["text_embedding"].parameters is None   # an ensemble
    assert SPECS["retrieval"].hotpath.index.include[:2] == ("gzip", "wget")
    assert SPECS["tokenizer"].hotpath.python_backend == "tokenizer"   # defaults to the model's name


def test_a_key_left_out_takes_the_one_default_the_runtime_reads_too():
    def without(d):
        del d["parameters"]["max_length"], d["parameters"]["tokenizer_file"]
        del d["hotpath"]["opset"]
    spec = _changed("sentence_embedder", without)()
    assert spec.parameters.max_length == MAX_LENGTH == EmbedderParameters.parse({}).max_length
    assert spec.parameters.tokenizer_file == "tokenizer.json"
    assert spec.hotpath.opset == BuildOptions.opset
    assert "max_length" not in spec.config.parameters   # nothing is written that the spec does not set


def test_the_export_fingerprint_hashes_the_table_as_written():
    spec = SPECS["sentence_embedder"]
    assert spec.hotpath_table == {**spec.raw["hotpath"], "kind": "python"}


@pytest.mark.parametrize("name", sorted(n for n, s in SPECS.items() if s.kind != "ensemble"))
def test_every_built_config_parses_through_the_class_its_model_reads_it_with(name):
    spec = SPECS[name]
    cls = parameter_class(spec.kind, spec.hotpath.python_backend)
    parse = cls.parse if cls is not None else from_parameters   # text_generation: its engine settings
    built = paths.model_repository() / name / "config.pbtxt"
    config = read_config(built.parent) if built.is_file() else spec.config
    params = {k: v.string_value for k, v in config.parameters.items()}
    assert parse({**params, "hotpath.restarted_at": "1.0"}) == spec.parameters   # the watchdog's mark is foreign


def test_runtime_parse_names_the_key():
    with pytest.raises(ParameterError, match=r"parameters\.max_k: must be an integer, got 'ten'"):
        RetrievalParameters.parse({"max_k": "ten"})
    with pytest.raises(ParameterError, match=r"parameters\.stor: unknown parameter"):
        RetrievalParameters.parse({"stor": "hnsw"})
    assert RetrievalParameters.parse({"stor": "hnsw", "max_k": "7", "default_k": "3"}, strict=False).max_k == 7


def test_a_spec_file_error_reads_as_one_line(tmp_path):
    path = tmp_path / "tokenizer.toml"
    path.write_text(SPECS["tokenizer"].source.read_text().replace("pad_to_multiple_of = 16", "pad_to_multiple_of = 'x'"))
    with pytest.raises(SpecError) as exc:
        load_spec(path)
    assert str(exc.value) == (f"{path}: model 'tokenizer', field 'parameters.pad_to_multiple_of': "
                              "must be an integer, got 'x'")
