"""Image attribution plots with Captum's visualization.visualize_image_attr arguments (matplotlib, imported when a
plot is made).

    from cattr import visualization as viz
    fig, ax = viz.visualize_image_attr(np.transpose(attr[0], (1, 2, 0)), np.transpose(img[0], (1, 2, 0)),
                                       method="blended_heat_map", sign="all", show_colorbar=True)

`attr` and `original_image` are (H, W, C) arrays (channels last) or (H, W); torch tensors are accepted too.
"""
import numpy as np

from ._core import to_numpy

__all__ = ["visualize_image_attr", "normalize_attr"]

_SIGNS = ("positive", "negative", "absolute_value", "all")
_METHODS = ("heat_map", "blended_heat_map", "original_image", "masked_image", "alpha_scaling")


def _threshold(values, percentile):
    """The smallest value v (values sorted ascending) at which the running sum reaches `percentile` % of the total:
    everything above it is treated as an outlier and saturates the colour scale."""
    if not 0 <= percentile <= 100:
        raise ValueError("outlier_perc must be between 0 and 100")
    v = np.sort(np.asarray(values, dtype=np.float64).reshape(-1))
    if v.size == 0:
        return 0.0
    running = np.cumsum(v)
    k = int(np.searchsorted(running, running[-1] * percentile / 100.0, side="left"))
    return float(v[min(k, v.size - 1)])


def normalize_attr(attr, sign="absolute_value", outlier_perc=2, reduction_axis=None):
    """Attributions summed over `reduction_axis` (if given), restricted to `sign` and scaled into [-1, 1] (sign
    "all") or [0, 1] (the others) by the outlier threshold."""
    if sign not in _SIGNS:
        raise ValueError("sign must be one of %s, not %r" % (", ".join(_SIGNS), sign))
    a = np.asarray(attr, dtype=np.float64)
    if reduction_axis is not None:
        a = a.sum(axis=reduction_axis)
    if sign == "all":
        scale = _threshold(np.abs(a), 100.0 - outlier_perc)
    elif sign == "positive":
        a = np.where(a > 0, a, 0.0)
        scale = _threshold(a, 100.0 - outlier_perc)
    elif sign == "negative":
        a = np.where(a < 0, a, 0.0)
        scale = -_threshold(-a, 100.0 - outlier_perc)
    else:
        a = np.abs(a)
        scale = _threshold(a, 100.0 - outlier_perc)
    if scale == 0:
        return np.zeros_like(a)
    return np.clip(a / scale, -1.0, 1.0)


def _image(img):
    img = np.asarray(to_numpy(img))
    if img.dtype.kind in "iu" or (img.size and img.max() > 1.0):
        return np.clip(img, 0, 255).astype(np.uint8)
    return np.clip(img, 0.0, 1.0)


def visualize_image_attr(attr, original_image=None, method="heat_map", sign="absolute_value", plt_fig_axis=None,
                         outlier_perc=2, cmap=None, alpha_overlay=0.5, show_colorbar=False, title=None,
                         fig_size=(6, 6), use_pyplot=True):
    """Captum's visualize_image_attr: method heat_map, blended_heat_map, original_image, masked_image or
    alpha_scaling; sign positive, negative, absolute_value or all. Returns (figure, axis)."""
    import matplotlib.pyplot as plt
    from matplotlib import colors

    if method not in _METHODS:
        raise ValueError("method must be one of %s, not %r" % (", ".join(_METHODS), method))
    a = np.asarray(to_numpy(attr), dtype=np.float64)
    if a.ndim == 2:
        a = a[:, :, None]
    if plt_fig_axis is not None:
        fig, ax = plt_fig_axis
    elif use_pyplot:
        fig, ax = plt.subplots(figsize=fig_size)
    else:
        from matplotlib.figure import Figure
        fig = Figure(figsize=fig_size)
        ax = fig.subplots()
    img = None
    if original_image is not None:
        img = _image(original_image)
        if img.ndim == 2:
            img = img[:, :, None]
    elif method != "heat_map":
        raise ValueError("method %s needs original_image" % method)
    ax.xaxis.set_ticks_position("none")
    ax.yaxis.set_ticks_position("none")
    ax.set_yticklabels([])
    ax.set_xticklabels([])
    ax.grid(False)
    shown = None
    if method == "original_image":
        ax.imshow(img if img.shape[2] != 1 else img[:, :, 0], cmap="gray" if img.shape[2] == 1 else None)
    else:
        norm = normalize_attr(a, sign, outlier_perc, reduction_axis=2)
        if sign == "all":
            default_cmap = colors.LinearSegmentedColormap.from_list("RdWhGn", ["red", "white", "green"])
            vmin, vmax = -1, 1
        else:
            default_cmap = {"positive": "Greens", "negative": "Reds", "absolute_value": "Blues"}[sign]
            vmin, vmax = 0, 1
        cm = cmap if cmap is not None else default_cmap
        if method == "heat_map":
            shown = ax.imshow(norm, cmap=cm, vmin=vmin, vmax=vmax)
        elif method == "blended_heat_map":
            grey = np.mean(np.asarray(img, dtype=np.float64), axis=2)
            ax.imshow(grey, cmap="gray")
            shown = ax.imshow(norm, cmap=cm, vmin=vmin, vmax=vmax, alpha=alpha_overlay)
        elif method == "masked_image":
            if sign == "all":
                raise ValueError("masked_image needs sign positive, negative or absolute_value")
            out = np.asarray(img, dtype=np.float64) * norm[:, :, None]
            ax.imshow(_image(out if img.dtype != np.uint8 else out.astype(np.uint8)).squeeze())
        else:  # alpha_scaling
            if sign == "all":
                raise ValueError("alpha_scaling needs sign positive, negative or absolute_value")
            base = np.asarray(img, dtype=np.float64)
            if img.dtype == np.uint8:
                base = base / 255.0
            if base.shape[2] == 1:
                base = np.repeat(base, 3, axis=2)
            ax.imshow(np.concatenate([base, norm[:, :, None]], axis=2))
    if show_colorbar and shown is not None:
        fig.colorbar(shown, ax=ax, orientation="vertical", fraction=0.046, pad=0.04)
    if title:
        ax.set_title(title)
    if use_pyplot:
        plt.show()
    return fig, ax
