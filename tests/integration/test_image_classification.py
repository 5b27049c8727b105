"""image_classification served by a real tritonserver vs an in-process PyTorch reference."""

import subprocess
import sys
import threading

import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient

from hotpath.client import ClassificationClient, ClientError, text_input
from hotpath.exporters.image_classifier import imagenet_labels, load_efficientnet
from hotpath.runtime.images import preprocess
from tests.imagegen import bad_inputs, variants

VARIANTS = variants()


@pytest.fixture(scope="module")
def reference():
    """Top-5 from PyTorch on the same decoded pixels, normalized here, independently of the graph."""
    net = load_efficientnet()
    labels = imagenet_labels()

    def top5(data: bytes):
        pixels = torch.from_numpy(np.array(preprocess(data))).to(torch.float32)
        x = ((pixels - 127.0) / 128.0).permute(2, 0, 1).unsqueeze(0)
        with torch.no_grad():
            probs = torch.softmax(net(x), dim=1)[0]
        scores, ids = torch.topk(probs, 5)
        return scores.numpy(), ids.numpy(), [labels[i] for i in ids.tolist()]
    return top5


@pytest.fixture()
def client(grpc_url):
    with ClassificationClient(grpc_url) as c:
        yield c


def test_served_top5_matches_pytorch_on_every_variant(client, reference):
    results = client.classify(list(VARIANTS.values()))  # several images per request
    for (name, data), got in zip(VARIANTS.items(), results):
        scores, ids, labels = reference(data)
        assert got.class_ids[0] == ids[0], f"{name}: top-1 {got.labels[0]} != reference {labels[0]}"
        np.testing.assert_allclose(got.scores, scores, atol=1e-3, err_msg=name)
        assert got.scores == sorted(got.scores, reverse=True), name
        assert got.labels == [imagenet_labels()[i] for i in got.class_ids], name


def test_known_photos_get_sensible_labels(client):
    chelsea, coffee = client.classify([VARIANTS["chelsea.jpg"], VARIANTS["coffee.png"]])
    assert {"tabby", "tiger cat", "Egyptian cat"} & set(chelsea.labels[:2])
    assert coffee.labels[0] == "espresso"


def test_exif_rotation_changes_nothing_for_the_client(client):
    upright, rotated = client.classify([VARIANTS["chelsea.jpg"], VARIANTS["chelsea_exif_rotated.jpg"]])
    assert upright.class_ids[:2] == rotated.class_ids[:2]


@pytest.mark.parametrize("name", list(bad_inputs()))
def test_bad_image_gets_a_clear_error(client, name):
    data, fragment = bad_inputs()[name]
    with pytest.raises(ClientError, match=fragment):
        client.classify([data])
    assert client.classify([VARIANTS["coffee.png"]])[0].labels[0] == "espresso"  # still serving


def test_bad_images_in_a_concurrent_burst_fail_alone(grpc_url, reference):
    bad = bad_inputs()
    goods = [VARIANTS[n] for n in ("chelsea.jpg", "coffee.png", "rocket.webp", "astronaut.jpg")] * 2
    payloads = [(f"good{i}", data, None) for i, data in enumerate(goods)]
    payloads[1:1] = [(name, data, fragment) for name, (data, fragment) in bad.items()]
    c = grpcclient.InferenceServerClient(grpc_url)
    results, done = {}, threading.Semaphore(0)
    for name, data, _ in payloads:
        def callback(result, error, name=name):
            results[name] = (result, error)
            done.release()
        c.async_infer("image_classification", [text_input("IMAGE", [data])], callback)
    for _ in payloads:
        assert done.acquire(timeout=120)
    for name, data, fragment in payloads:
        result, error = results[name]
        if fragment is None:
            assert error is None, f"{name}: {error.message()}"
            assert result.as_numpy("CLASS_IDS")[0][0] == reference(data)[1][0]
        else:
            assert result is None and fragment in error.message(), f"{name}: {error}"
    c.close()


def test_cli_classify(grpc_url, tmp_path):
    path = tmp_path / "coffee.png"
    path.write_bytes(VARIANTS["coffee.png"])
    out = subprocess.run([sys.executable, "-m", "hotpath", "classify", "--url", grpc_url, str(path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0] == str(path) and len(lines) == 6 and "espresso" in lines[1]
