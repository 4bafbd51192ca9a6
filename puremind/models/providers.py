"""Which onnxruntime execution providers, torch device and export variant to use: pure logic.

The functions here take what the machine offers as arguments (the available provider names, the
platform), so every branch is tested without the hardware. `available_providers()` is the one
place that asks onnxruntime, and it imports it only when called.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from puremind.errors import ModelError

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
COREML = "CoreMLExecutionProvider"

#: what each explicit `device` setting asks onnxruntime for; "mps" is Apple's GPU, reached through CoreML in ONNX.
DEVICE_PROVIDER = {"cuda": CUDA, "coreml": COREML, "mps": COREML}
DEVICES = ("auto", "cpu", "cuda", "coreml", "mps")

_INSTALL_HINTS = {
    CUDA: "install `onnxruntime-gpu` in place of `onnxruntime` (never both)",
    COREML: "CoreML comes with the plain `onnxruntime` wheel on Apple Silicon macOS",
}


def is_apple_silicon(system: str, machine: str) -> bool:
    """True for macOS on arm64 (`platform.system()`, `platform.machine()`)."""
    return system == "Darwin" and machine.lower() in ("arm64", "aarch64")


def select_providers(device: str, available: Sequence[str], system: str, machine: str) -> list[str]:
    """The execution providers to hand onnxruntime, best first; the list always ends with the CPU.

    "auto": CoreML on Apple Silicon when onnxruntime offers it, else CUDA when offered, else the CPU.
    "cuda", "coreml" or "mps" (the same as coreml for ONNX): that provider, or an error when this
    onnxruntime does not offer it (onnxruntime itself would only warn and run on the CPU).

    Raises:
        ModelError: an unknown device, or an explicit device this onnxruntime does not offer; the
            message names the providers that are available.
    """
    device = device.strip().lower()
    offered = set(available)
    if device == "auto":
        if COREML in offered and is_apple_silicon(system, machine):
            return [COREML, CPU]
        if CUDA in offered:
            return [CUDA, CPU]
        return [CPU]
    if device == "cpu":
        return [CPU]
    if device not in DEVICE_PROVIDER:
        raise ModelError(f"unknown device {device!r}; choose one of: {', '.join(DEVICES)}")
    wanted = DEVICE_PROVIDER[device]
    if wanted not in offered:
        names = ", ".join(sorted(offered)) or "none"
        raise ModelError(
            f"device {device!r} needs onnxruntime's {wanted}, which this installation does not offer "
            f"(available: {names})",
            hint=f"{_INSTALL_HINTS[wanted]}, or set device = \"auto\" or \"cpu\"",
        )
    return [wanted, CPU]


def choose_variant(providers: Sequence[str], present: Sequence[str], default_variant: Mapping[str, str],
                   kept_out: Sequence[str] = ()) -> str:
    """The exported variant to run: the default for the first provider that has one present.

    Walks `providers` in order (the first is the one that will do the work) and takes the variant
    `default_variant` names for it when that variant was exported; failing that, "fp32" when
    present, else the first present variant. A variant in `kept_out` (it failed its fidelity check at
    export, `puremind.models.fidelity`) is never chosen: int8 kept out on the CPU gives fp32.

    Raises:
        ModelError: no variant is present at all, or every one is kept out.
    """
    if not present:
        raise ModelError("no exported model variant is present", hint="run `puremind export-models`")
    usable = [v for v in present if v not in set(kept_out)]
    if not usable:
        raise ModelError(
            f"every exported variant ({', '.join(sorted(present))}) failed its check against the source model",
            hint="set [models] variant to force one, or run `puremind export-models --force` to export again",
        )
    for provider in providers:
        name = default_variant.get(provider)
        if name is not None and name in usable:
            return name
    if "fp32" in usable:
        return "fp32"
    return sorted(usable)[0]


def select_torch_device(device: str, *, cuda_available: bool, mps_available: bool) -> str:
    """The torch device for the torch backend: "auto" prefers CUDA, then Apple's MPS, then the CPU.

    "coreml" means Apple's GPU here too, so it maps to "mps".

    Raises:
        ModelError: an unknown device, or an explicit device torch cannot reach on this machine.
    """
    device = device.strip().lower()
    if device == "auto":
        return "cuda" if cuda_available else "mps" if mps_available else "cpu"
    if device == "cpu":
        return "cpu"
    if device == "cuda":
        if not cuda_available:
            raise ModelError("device 'cuda' is not available to torch on this machine", hint="set device = \"cpu\"")
        return "cuda"
    if device in ("mps", "coreml"):
        if not mps_available:
            raise ModelError(f"device {device!r} (Apple MPS) is not available to torch on this machine",
                             hint="set device = \"cpu\"")
        return "mps"
    raise ModelError(f"unknown device {device!r}; choose one of: {', '.join(DEVICES)}")


def available_providers() -> list[str]:
    """The execution providers this onnxruntime build offers (imports onnxruntime).

    Raises:
        ModelError: onnxruntime is not installed or cannot be loaded.
    """
    try:
        import onnxruntime
    except ImportError as exc:  # a broken or missing wheel; keyword search still works without it
        raise ModelError(f"onnxruntime cannot be imported: {exc}", hint="pip install onnxruntime") from exc
    return list(onnxruntime.get_available_providers())


def providers_for(device: str) -> list[str]:
    """`select_providers` for this machine: what onnxruntime offers and the running platform.

    Raises:
        ModelError: as `select_providers` and `available_providers`.
    """
    import platform

    return select_providers(device, available_providers(), platform.system(), platform.machine())
