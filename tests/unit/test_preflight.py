import shutil

from hotpath import paths
from hotpath.specs.preflight import check_repository


def _copy_configs(tmp_path):
    repo = tmp_path / "repo"
    for model in ("tokenizer", "text_encoder", "text_embedding_exact"):
        (repo / model / "1").mkdir(parents=True)
        shutil.copy(paths.model_repository() / model / "config.pbtxt", repo / model)
    (repo / "tokenizer" / "1" / "model.py").write_text("")
    return repo


def test_missing_onnx_file_is_named(tmp_path):
    repo = _copy_configs(tmp_path)
    assert check_repository(repo) == ["text_encoder: 1/model.onnx is missing (run `make engines`)"]
    (repo / "text_encoder" / "1" / "model.onnx").write_bytes(b"")
    assert check_repository(repo) == []


def test_broken_config_and_missing_ensemble_step(tmp_path):
    repo = _copy_configs(tmp_path)
    (repo / "text_encoder" / "1" / "model.onnx").write_bytes(b"")
    (repo / "tokenizer" / "config.pbtxt").write_text("max_batch_size: [")
    problems = check_repository(repo)
    assert any(p.startswith("tokenizer: config.pbtxt does not parse") for p in problems)
    assert "text_embedding_exact: ensemble step model 'tokenizer' is not in the repository" in problems


def test_missing_warmup_sample_is_named(tmp_path):
    """Triton fails a model's load when its model_warmup input_data_file is missing: say so before."""
    repo = tmp_path / "repo"
    (repo / "image_preprocess" / "1").mkdir(parents=True)
    shutil.copy(paths.model_repository() / "image_preprocess" / "config.pbtxt", repo / "image_preprocess")
    (repo / "image_preprocess" / "1" / "model.py").write_text("")
    (problem,) = check_repository(repo)
    assert problem.startswith("image_preprocess: warmup/rocket_jpg (model_warmup 'one_jpeg', input IMAGE) is missing")
    (repo / "image_preprocess" / "warmup").mkdir()
    (repo / "image_preprocess" / "warmup" / "rocket_jpg").write_bytes(b"\0\0\0\0")
    assert check_repository(repo) == []
