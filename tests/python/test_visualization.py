"""cattr.visualization (matplotlib) and its normalisation, against Captum's where importable."""
import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib", reason="matplotlib is not installed")
matplotlib.use("Agg")

from cattr import visualization as viz  # noqa: E402


def test_methods_and_signs():
    rng = np.random.default_rng(0)
    attr = rng.normal(size=(8, 8, 3))
    img = rng.uniform(size=(8, 8, 3))
    for method in ("heat_map", "blended_heat_map", "original_image", "masked_image", "alpha_scaling"):
        for sign in ("positive", "negative", "absolute_value", "all"):
            if method in ("masked_image", "alpha_scaling") and sign == "all":
                with pytest.raises(ValueError):
                    viz.visualize_image_attr(attr, img, method=method, sign=sign, use_pyplot=False)
                continue
            fig, ax = viz.visualize_image_attr(attr, img, method=method, sign=sign, use_pyplot=False,
                                               show_colorbar=True, title=method)
            assert fig is not None and ax is not None
    with pytest.raises(ValueError):
        viz.visualize_image_attr(attr, None, method="blended_heat_map", use_pyplot=False)


def test_normalize_matches_captum():
    try:
        from captum.attr._utils.visualization import _normalize_attr
    except Exception as e:  # noqa: BLE001
        pytest.skip("Captum is not importable (%s)" % e)
    rng = np.random.default_rng(1)
    attr = rng.normal(size=(6, 5, 3))
    for sign in ("positive", "negative", "absolute_value", "all"):
        for perc in (0, 2, 10):
            np.testing.assert_allclose(viz.normalize_attr(attr, sign, perc, 2), _normalize_attr(attr, sign, perc, 2),
                                       rtol=1e-12)
