"""An image pixel budget by default: a large image is downscaled (aspect kept) to ``defaults.IMAGE_MAX_PIXELS``
with one notice line, a small one is left alone, and ``minispark --max-pixels`` changes the budget.

    .venv/bin/python -m pytest -q tests/target/test_pixel_budget.py
"""

from __future__ import annotations

import warnings

import pytest
from typer.testing import CliRunner

from minispark.core import defaults
from minispark.cli import app
from minispark.target.loading import load_target
from tests.tiny_models import make_test_image


@pytest.fixture(scope="module")
def vlm(tiny_dir):
    return load_target(str(tiny_dir("qwen2_5_vl")))


@pytest.fixture(scope="module")
def photo(tmp_path_factory):
    """1400 × 1000: 1.4 MP, over the default ~1.0 MP budget."""
    return make_test_image(tmp_path_factory.mktemp("photos") / "photo.png", size=(1400, 1000))


def messages(path) -> list[dict]:
    return [{"role": "user", "content": [{"type": "image", "image": str(path)}, {"type": "text", "text": "What?"}]}]


def test_large_image_is_downscaled_to_the_default_budget_with_a_notice(vlm, photo, monkeypatch):
    monkeypatch.delenv(defaults.IMAGE_MAX_PIXELS_ENV, raising=False)
    asked = messages(photo)
    with pytest.warns(UserWarning, match=r"photo\.png: 1400x1000 downscaled to \d+x\d+ \(pixel budget 1,003,520") as seen:
        (image,) = vlm._budgeted_images(asked)
    assert len(seen) == 1
    width, height = image.size
    assert width * height <= defaults.IMAGE_MAX_PIXELS
    assert abs(width / height - 1.4) < 0.05  # aspect kept
    assert "max_pixels" not in asked[0]["content"][0]  # the caller's messages are left as they were
    vlm.encode(asked)  # and the whole prompt encodes


def test_small_image_is_left_alone(vlm, test_image, monkeypatch):
    monkeypatch.delenv(defaults.IMAGE_MAX_PIXELS_ENV, raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        vlm._budgeted_images(messages(test_image))


def test_max_pixels_changes_the_budget(vlm, photo, test_image, monkeypatch):
    monkeypatch.setenv(defaults.IMAGE_MAX_PIXELS_ENV, str(56 * 56))
    assert defaults.image_max_pixels() == 56 * 56
    with pytest.warns(UserWarning, match="pixel budget 3,136"):
        (image,) = vlm._budgeted_images(messages(photo))
    assert image.size[0] * image.size[1] <= 56 * 56
    monkeypatch.setenv(defaults.IMAGE_MAX_PIXELS_ENV, str(10 ** 8))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (image,) = vlm._budgeted_images(messages(photo))
    assert image.size[0] * image.size[1] > 1_300_000  # only rounded to whole 28-pixel tiles


def test_cli_prints_one_notice_and_refuses_a_tiny_budget(tiny_dir, photo, monkeypatch):
    monkeypatch.delenv(defaults.IMAGE_MAX_PIXELS_ENV, raising=False)
    runner = CliRunner()
    result = runner.invoke(app, ["generate", "--target", str(tiny_dir("qwen2_5_vl")), "--image", str(photo),
                                 "--drafter", "none", "--max-new-tokens", "2", "--prompt", "What?"])
    assert result.exit_code == 0, result.output
    notices = [line for line in result.output.splitlines() if "downscaled" in line]
    assert len(notices) == 1 and notices[0].startswith("notice: image ")
    monkeypatch.delenv(defaults.IMAGE_MAX_PIXELS_ENV, raising=False)
    bad = runner.invoke(app, ["--max-pixels", "100", "generate"])
    assert bad.exit_code == 2 and "--max-pixels" in bad.output
