from hotpath.specs.fingerprint import fingerprint, is_fresh, write_stamp


def test_fingerprint_tracks_settings_and_file_content(tmp_path):
    f = tmp_path / "weights.bin"
    f.write_bytes(b"abc")
    base = fingerprint({"opset": 17}, [f])
    assert fingerprint({"opset": 17}, [f]) == base
    assert fingerprint({"opset": 18}, [f]) != base
    f.write_bytes(b"abd")
    assert fingerprint({"opset": 17}, [f]) != base


def test_stamp_is_fresh_only_with_same_digest_and_files(tmp_path):
    (tmp_path / "model.onnx").write_bytes(b"x")
    write_stamp(tmp_path, "d1", ["model.onnx"], {"max_abs_diff": 0.0})
    assert is_fresh(tmp_path, "d1")
    assert not is_fresh(tmp_path, "d2")
    (tmp_path / "model.onnx").unlink()
    assert not is_fresh(tmp_path, "d1")
