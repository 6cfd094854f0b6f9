"""Image pipelines from Halide's auto-scheduling work, on single-channel float32 images: a separable
3x3 box blur, an unsharp mask and the Harris corner response. Outputs cover the pixels whose whole
neighbourhood lies inside the input (no border handling), as Halide's versions do.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from tvm import te, tirx

from autosched.errors import UserError
from autosched.workload import Workload, workload_from_te
from autosched.workloads._registry import Param, register_workload

DTYPE = "float32"
UNSHARP_SIGMA = 1.5
UNSHARP_RADIUS = 3  # 7 taps, two sigmas either side
HARRIS_K = 0.04
# Gradients are scaled by 1/12 (OpenCV's 1 / (2**(ksize - 1) * block_size)), which keeps the
# response's float32 rounding error, from det - k * trace^2 cancelling, small in absolute terms.
HARRIS_GRADIENT_SCALE = 1 / 12


def _image_params(height: int, width: int) -> tuple[Param, Param]:
    return Param("H", int, height, "image height"), Param("W", int, width, "image width")


def _check_fits(name: str, H: int, W: int, border: int) -> None:
    size = 2 * border + 1
    if min(H, W) < size:
        raise UserError(f"{name}: the image must be at least {size}x{size}, got {H}x{W}")


@register_workload(
    "blur3x3",
    "separable 3x3 box blur in two stages (rows, then columns) of an H x W image",
    *_image_params(2048, 2048),
)
def blur3x3(H: int, W: int) -> Workload:
    _check_fits("blur3x3", H, W, 1)
    image = te.placeholder((H, W), DTYPE, name="image")
    third = tirx.const(1 / 3, DTYPE)
    blur_x = te.compute(
        (H, W - 2),
        lambda y, x: (image[y, x] + image[y, x + 1] + image[y, x + 2]) * third,
        name="blur_x",
    )
    blur_y = te.compute(
        (H - 2, W - 2),
        lambda y, x: (blur_x[y, x] + blur_x[y + 1, x] + blur_x[y + 2, x]) * third,
        name="blur_y",
    )

    def reference(inputs: list[np.ndarray]) -> list[np.ndarray]:
        windows = sliding_window_view(inputs[0].astype(np.float64), (3, 3))
        return [windows.mean(axis=(2, 3)).astype(DTYPE)]

    # Two additions and a multiply per pixel of each stage.
    flops = 3 * H * (W - 2) + 3 * (H - 2) * (W - 2)
    return workload_from_te(
        "blur3x3", {"H": H, "W": W}, [image, blur_y], flops=flops, reference=reference
    )


def gaussian_taps(sigma: float, radius: int) -> list[float]:
    """Normalised Gaussian weights at offsets -radius..radius (as OpenCV's getGaussianKernel)."""
    weights = [math.exp(-(i * i) / (2 * sigma * sigma)) for i in range(-radius, radius + 1)]
    return [w / sum(weights) for w in weights]


@register_workload(
    "unsharp_mask",
    "unsharp mask of an H x W image: 2 * image - gaussian_blur(image), a 7-tap separable "
    "Gaussian of sigma 1.5",
    *_image_params(2048, 2048),
)
def unsharp_mask(H: int, W: int) -> Workload:
    r = UNSHARP_RADIUS
    _check_fits("unsharp_mask", H, W, r)
    taps = gaussian_taps(UNSHARP_SIGMA, r)
    image = te.placeholder((H, W), DTYPE, name="image")
    blur_x = te.compute(
        (H, W - 2 * r),
        lambda y, x: sum(image[y, x + i] * tirx.const(taps[i], DTYPE) for i in range(2 * r + 1)),
        name="blur_x",
    )
    blur_y = te.compute(
        (H - 2 * r, W - 2 * r),
        lambda y, x: sum(blur_x[y + i, x] * tirx.const(taps[i], DTYPE) for i in range(2 * r + 1)),
        name="blur_y",
    )
    sharpened = te.compute(
        (H - 2 * r, W - 2 * r),
        lambda y, x: image[y + r, x + r] * tirx.const(2, DTYPE) - blur_y[y, x],
        name="sharpened",
    )

    def reference(inputs: list[np.ndarray]) -> list[np.ndarray]:
        pixels = inputs[0].astype(np.float64)
        kernel = np.outer(taps, taps)
        blurred = np.einsum("yxij,ij->yx", sliding_window_view(pixels, kernel.shape), kernel)
        return [(2 * pixels[r:-r, r:-r] - blurred).astype(DTYPE)]

    # Seven multiplies and six additions per pixel of each blur stage; a multiply and a
    # subtraction per output pixel.
    taps_flops = 2 * (2 * r + 1) - 1
    flops = taps_flops * H * (W - 2 * r) + (taps_flops + 2) * (H - 2 * r) * (W - 2 * r)
    return workload_from_te(
        "unsharp_mask", {"H": H, "W": W}, [image, sharpened], flops=flops, reference=reference
    )


@register_workload(
    "harris_corner",
    "Harris corner response of an H x W image: 3x3 Sobel gradients (scaled by 1/12, as OpenCV), "
    "3x3 box sums of their products, det - 0.04 * trace^2",
    *_image_params(2048, 2048),
)
def harris_corner(H: int, W: int) -> Workload:
    _check_fits("harris_corner", H, W, 2)
    image = te.placeholder((H, W), DTYPE, name="image")
    two = tirx.const(2, DTYPE)
    scale = tirx.const(HARRIS_GRADIENT_SCALE, DTYPE)

    def column_difference(y: tirx.Var, x: tirx.Var) -> tirx.PrimExpr:
        return image[y, x + 2] - image[y, x]

    def row_difference(y: tirx.Var, x: tirx.Var) -> tirx.PrimExpr:
        return image[y + 2, x] - image[y, x]

    grad_x = te.compute(
        (H - 2, W - 2),
        lambda y, x: (
            (
                column_difference(y, x)
                + two * column_difference(y + 1, x)
                + column_difference(y + 2, x)
            )
            * scale
        ),
        name="grad_x",
    )
    grad_y = te.compute(
        (H - 2, W - 2),
        lambda y, x: (
            (row_difference(y, x) + two * row_difference(y, x + 1) + row_difference(y, x + 2))
            * scale
        ),
        name="grad_y",
    )

    def box_sum(first: te.Tensor, second: te.Tensor, name: str) -> te.Tensor:
        dy = te.reduce_axis((0, 3), name="dy")
        dx = te.reduce_axis((0, 3), name="dx")
        return te.compute(
            (H - 4, W - 4),
            lambda y, x: te.sum(first[y + dy, x + dx] * second[y + dy, x + dx], axis=[dy, dx]),
            name=name,
        )

    sxx = box_sum(grad_x, grad_x, "sum_xx")
    syy = box_sum(grad_y, grad_y, "sum_yy")
    sxy = box_sum(grad_x, grad_y, "sum_xy")
    response = te.compute(
        (H - 4, W - 4),
        lambda y, x: (
            sxx[y, x] * syy[y, x]
            - sxy[y, x] * sxy[y, x]
            - tirx.const(HARRIS_K, DTYPE) * (sxx[y, x] + syy[y, x]) * (sxx[y, x] + syy[y, x])
        ),
        name="response",
    )

    def reference(inputs: list[np.ndarray]) -> list[np.ndarray]:
        pixels = inputs[0].astype(np.float64)
        sobel_x = np.array([[-1, 0, 1], [-2, 0, 2], [-1, 0, 1]]) * HARRIS_GRADIENT_SCALE
        windows = sliding_window_view(pixels, (3, 3))
        gx = np.einsum("yxij,ij->yx", windows, sobel_x)
        gy = np.einsum("yxij,ij->yx", windows, sobel_x.T)

        def box(values: np.ndarray) -> np.ndarray:
            return sliding_window_view(values, (3, 3)).sum(axis=(2, 3))

        xx, yy, xy = box(gx * gx), box(gy * gy), box(gx * gy)
        return [(xx * yy - xy * xy - HARRIS_K * (xx + yy) ** 2).astype(DTYPE)]

    # Per gradient pixel: five additions and two multiplies for each of the two Sobel filters; per
    # output pixel: nine products and eight additions for each of the three box sums (51), and
    # the response: three multiplies, two subtractions, an addition and the scaling by k (7).
    flops = 14 * (H - 2) * (W - 2) + 58 * (H - 4) * (W - 4)
    return workload_from_te(
        "harris_corner", {"H": H, "W": W}, [image, response], flops=flops, reference=reference
    )
