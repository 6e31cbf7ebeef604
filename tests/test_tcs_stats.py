"""AUC of critique scores (TCS-Bench) against scikit-learn on fixed inputs."""

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from eval.stats import auc_mann_whitney


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auc_matches_sklearn_with_ties(seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size=60)
    scores = rng.integers(0, 9, size=60) / 8  # critique scores k/8: many ties
    assert auc_mann_whitney(scores, labels) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)


def test_auc_fixed_values():
    labels = [1, 1, 1, 0, 0, 0, 1, 0]
    scores = [0.875, 0.5, 0.75, 0.25, 0.5, 0.0, 1.0, 0.625]
    assert auc_mann_whitney(scores, labels) == pytest.approx(roc_auc_score(labels, scores))
    assert auc_mann_whitney([1 - s for s in scores], labels) == pytest.approx(1 - roc_auc_score(labels, scores))
    assert auc_mann_whitney([0.1, 0.2], [0, 0]) is None
    with pytest.raises(ValueError):
        auc_mann_whitney([0.1], [0, 1])


def test_auc_rejects_non_finite_scores():
    # a NaN critique score (e.g. 0 critiques parsed -> 0/0) must not turn into a silent NaN AUC
    with pytest.raises(ValueError, match="score"):
        auc_mann_whitney([0.9, float("nan"), 0.1], [1, 1, 0])
