"""The dataset gate's rules (validate/dataset.py): metrics, the drop, the one-line refusal,
reading a set, and the recipe keys."""

import numpy as np
import pytest

from edgekit.config.recipe import DatasetGate, Validation
from edgekit.errors import ConfigError
from edgekit.validate.dataset import drop, load_set, refusal, score

LOGITS = [(np.array([[0.1, 0.9, 0.0]]),), (np.array([[0.8, 0.1, 0.7]]),),
          (np.array([[0.2, 0.3, 0.5]]),), (np.array([[0.0, 0.4, 0.6]]),)]
LABELS = np.array([1, 2, 2, 0])


def test_top1_and_top5_count_the_label_among_the_largest():
    assert score("top1", LOGITS, LABELS) == 0.5
    assert score("top5", LOGITS, LABELS) == 1.0     # 3 classes: all within the top 5


def test_mse_is_lower_better_and_its_drop_is_an_increase():
    target = np.stack([o[0] for o in LOGITS])
    assert score("mse", LOGITS, target) == 0.0
    assert score("mse", LOGITS, target + 0.5) == pytest.approx(0.25)
    assert drop("mse", 0.0, 0.25) == 0.25 and drop("top1", 0.97, 0.95) == pytest.approx(0.02)


def test_cosine_is_the_mean_per_sample():
    target = np.stack([o[0] for o in LOGITS])
    assert score("cosine", LOGITS, 2 * target) == pytest.approx(1.0)


def half(outputs, labels):
    return len(outputs) / 8


def test_a_custom_metric_is_a_host_callable():
    assert score("tests.unit.test_dataset_metrics:half", LOGITS, LABELS) == 0.5
    with pytest.raises(ConfigError, match="cannot import"):
        score("no_such_module_x:f", LOGITS, LABELS)


def test_the_refusal_is_one_line_with_metric_reference_measured_and_drop():
    assert refusal("top1", 0.97, 0.965, 0.01) is None
    assert refusal("top1", 0.97, 0.85, 0.01) == (
        "dataset gate: top1 reference 0.9700, measured 0.8500, drop 0.1200 > max_drop 0.01")
    assert refusal("top1", 0.97, float("nan"), 0.01) is not None


def test_a_set_is_read_from_a_npz_and_labels_of_another_length_are_refused(tmp_path):
    np.savez(tmp_path / "s.npz", x=np.arange(12.0).reshape(4, 1, 3))
    np.save(tmp_path / "y.npy", LABELS)
    samples, labels = load_set(tmp_path / "s.npz", tmp_path / "y.npy", inputs=1, limit=3)
    assert len(samples) == 3 and samples[2][0].shape == (1, 3) and list(labels) == [1, 2, 2]
    np.save(tmp_path / "y.npy", LABELS[:2])
    with pytest.raises(ConfigError, match="2 labels for 4 samples"):
        load_set(tmp_path / "s.npz", tmp_path / "y.npy", inputs=1)


def test_the_recipe_keys_check_their_values():
    assert Validation(repeat=64).repeat == 64
    with pytest.raises(ValueError):
        Validation(repeat=0)
    with pytest.raises(ValueError, match="expected one of: top1, top5, mse, cosine"):
        DatasetGate(samples="s.npz", labels="y.npy", metric="accuracy")

