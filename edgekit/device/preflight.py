"""Preflight: can this device execute this bundle? Decided before anything is uploaded."""

from __future__ import annotations

from edgekit.config.profiles import Target, available_targets, load_target
from edgekit.device.probe import DeviceInfo
from edgekit.models.bundle import Manifest, ModuleVariant

MIN_GLIBC = (2, 28)  # the IREE runtime wheels the device tools come from are manylinux_2_28


def problems(manifest: Manifest, info: DeviceInfo) -> list[str]:
    """Reasons the device cannot run the bundle (empty: it can)."""
    return target_problems(Target.model_validate(manifest.target_profile), info,
                           arch=manifest.arch, bundle=True)


def space_problem(info: DeviceInfo, payload_bytes: int) -> str | None:
    """Why the release does not fit on the device's disk (None: it fits, or the device did not
    say). A disk that is full is no reason the device cannot run the code: it is answered
    apart, with the exit code of a disk that fills during the upload."""
    if info.free_kb and info.free_kb * 1024 < payload_bytes * 1.2:
        return (f"only {info.free_kb // 1024} MiB free under .edgekit; the upload needs "
                f"{payload_bytes * 1.2 / 2**20:.1f} MiB")
    return None


def target_problems(profile: Target, info: DeviceInfo, arch: str | None = None,
                    bundle: bool = False) -> list[str]:
    """Reasons the device cannot run code built for `profile`: known before anything is built
    (`deploy --recipe` asks before building)."""
    found: list[str] = []
    arch = arch or profile.arch
    if profile.backend == "llvm-cpu" and arch != info.arch:
        found.append(f"the bundle is {arch} code ({profile.name}) and the device is {info.arch}"
                     if bundle else f"target {profile.name} builds {arch} code and the device "
                                    f"is {info.arch}")
    if profile.cpu is not None and arch == info.arch:
        wanted = [f.lstrip("+") for f in profile.cpu.features.split(",") if f.startswith("+")]
        for feature in wanted:
            if info.has_cpu_feature(feature) is False:
                found.append(f"the device's CPU lacks '{feature}', which {profile.name} "
                             "code uses")
    if profile.vulkan is not None:
        found += vulkan_problems(profile, info)
    glibc = _version(info.glibc)
    if glibc and glibc < MIN_GLIBC:
        found.append(f"glibc {info.glibc} is older than {'.'.join(map(str, MIN_GLIBC))}, which "
                     "the IREE runtime tools need")
    return found


def pick_variant(manifest: Manifest, info: DeviceInfo) -> tuple[ModuleVariant | None,
                                                                 tuple[str, ...]]:
    """The first of the bundle's CPU variants whose features the device reports having (None:
    the baseline module.vmfb), and why each variant before it was passed over. A feature the
    device does not report either way counts as missing: a wrong guess would crash there."""
    skipped = []
    for variant in manifest.variants:
        wanted = [f.lstrip("+") for f in variant.features.split(",") if f.startswith("+")]
        lacking = [f for f in wanted if info.has_cpu_feature(f) is not True]
        if not lacking:
            return variant, tuple(skipped)
        skipped.append(f"{variant.name}: the device's CPU lacks {', '.join(lacking)}")
    return None, tuple(skipped)


def vulkan_problems(target: Target, info: DeviceInfo) -> list[str]:
    if not info.vulkan_devices:
        return ["the device has no Vulkan device (vulkaninfo found none)"]
    wanted = target.vulkan.device_match
    if wanted and not any(w.lower() in d.lower() for d in info.vulkan_devices for w in wanted):
        return [f"target {target.name} compiles for Vulkan '{target.vulkan.target}' "
                f"({' / '.join(wanted)} GPUs) but the device's Vulkan device is "
                f"{', '.join(info.vulkan_devices)}"]
    return []


def fitting_targets(info: DeviceInfo, backend: str | None = None) -> list[str]:
    """Profiles whose code this device can run (optionally only of one backend)."""
    fits = []
    for name, path in available_targets().items():
        target = load_target(str(path))
        if backend and target.backend != backend:
            continue
        if target.backend == "llvm-cpu" and target.arch != info.arch:
            continue
        if target.vulkan is not None and vulkan_problems(target, info):
            continue
        fits.append(name)
    return fits


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for p in text.split("."):
        if not (p.isascii() and p.isdigit() and len(p) < 10):   # the device's glibc text
            break
        parts.append(int(p))
    return tuple(parts)
