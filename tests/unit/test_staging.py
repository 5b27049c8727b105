"""The staged copy the local server runs: substitutes ORT, never rewrites the repository."""

from hotpath import paths
from hotpath.repository import read_config
from hotpath.server.staging import stage_repository


def test_onnxruntime_models_are_substituted_in_the_staged_copy_only(tmp_path):
    repo = paths.model_repository()
    before = {p: p.read_bytes() for p in repo.glob("*/config.pbtxt")}
    messages = []
    staged = stage_repository(repo, tmp_path / "staged", ort_threads=1, log=messages.append)

    assert {"text_encoder", "tokenizer", "text_embedding_exact", "text_embedding"} <= set(staged)
    encoder = read_config(tmp_path / "staged" / "text_encoder")
    assert encoder.backend == "python"
    assert encoder.parameters["intra_op_thread_count"].string_value == "1"
    assert all(g.kind == g.KIND_CPU for g in encoder.instance_group)
    runner = (tmp_path / "staged" / "text_encoder" / "1" / "model.py").read_text()
    assert "onnxruntime" in runner
    assert any("text_encoder: backend onnxruntime -> python" in m for m in messages)
    # untouched models are linked, and the repository itself is unchanged
    assert (tmp_path / "staged" / "tokenizer").is_symlink()
    assert {p: p.read_bytes() for p in repo.glob("*/config.pbtxt")} == before
    assert read_config(repo / "text_encoder").backend == "onnxruntime"
