"""Data-layout helpers (vectorised numpy): what the chips' digital units implement, and what a float
reference of the same operator computes."""

from __future__ import annotations

import numpy as np


def im2col(x: np.ndarray, kernel, strides, padding, dilation, pad_value: int = 0) -> np.ndarray:
    """Unfold an NCHW tensor into convolution input vectors.

    Parameters
    ----------
    x : np.ndarray
        Input of shape ``(N, C, H, W)``.
    kernel, strides, dilation : tuple of int
        ``(KH, KW)``, ``(SH, SW)``, ``(DH, DW)``.
    padding : tuple of int
        ``(top, left, bottom, right)``.
    pad_value : int
        Value of padded positions (the quantisation zero point, so that
        padding represents real zero).

    Returns
    -------
    np.ndarray
        Shape ``(N*OH*OW, C*KH*KW)``; column order ``(c, i, j)``, row order
        ``(n, oh, ow)``.
    """
    n, c, h, w = x.shape
    kh, kw = kernel
    sh, sw = strides
    dh, dw = dilation
    top, left, bottom, right = padding
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=pad_value)
    oh = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    ow = (w + left + right - dw * (kw - 1) - 1) // sw + 1
    win = np.lib.stride_tricks.sliding_window_view(xp, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(2, 3))
    win = win[:, :, : (oh - 1) * sh + 1 : sh, : (ow - 1) * sw + 1 : sw, ::dh, ::dw]  # (N,C,OH,OW,KH,KW)
    return np.ascontiguousarray(win.transpose(0, 2, 3, 1, 4, 5)).reshape(n * oh * ow, c * kh * kw)


def quantize_codes(x: np.ndarray, scale: float, zero: int, bits: int, signed: bool) -> np.ndarray:
    """Float activations to integer codes (``DCOM.quantize``).

    Unsigned: ``clip(round(x / scale) + zero, 0, 2^bits - 1)``; signed:
    ``clip(round(x / scale), -(2^(bits-1) - 1), 2^(bits-1) - 1)``.
    """
    q = np.rint(x.astype(np.float64) / scale)
    if signed:
        lim = 2 ** (bits - 1) - 1
        q = np.clip(q, -lim, lim)
    else:
        q = np.clip(q + zero, 0, 2**bits - 1)
    return q.astype(np.int32)


def dequantize(acc: np.ndarray, scale: float, zero: int = 0, wsum=None, wscale=None, bias=None) -> np.ndarray:
    """Integer accumulators to float (``DCOM.dequantize``): ``(acc - zero * wsum) * scale * wscale + bias``."""
    acc = acc.astype(np.float64)
    if zero:
        acc = acc - int(zero) * wsum.astype(np.float64)
    acc = acc * scale
    if wscale is not None:
        acc = acc * wscale.astype(np.float64)
    if bias is not None:
        acc = acc + bias.astype(np.float64)
    return acc
