"""Device mesh construction and the logical-axis -> mesh-axis rules, in one place."""

from __future__ import annotations

import math
from typing import Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from greso_jax.core.specs import ConfigError

MESH_AXES = ("data", "fsdp", "tensor")

# Every logical axis a parameter or activation may name, and the mesh axis it is split
# over (None: replicated). Parameters shard their "embed" dimension over fsdp (ZeRO-3
# style) and their head / MLP / vocabulary dimension over tensor (Megatron style).
LOGICAL_AXIS_RULES: dict[str, str | tuple[str, ...] | None] = {
    "batch": ("data", "fsdp"),
    "vocab": "tensor",
    "embed": "fsdp",
    "heads": "tensor",
    "kv_heads": "tensor",
    "mlp": "tensor",
    "norm": None,
    "seq": None,
}


def resolve_axis_sizes(num_devices: int, data: int = -1, fsdp: int = 1, tensor: int = 1) -> tuple[int, int, int]:
    """Fills the one -1 axis so the product equals num_devices; checks the product otherwise (a
    ConfigError naming the mesh.* fields: a mesh that does not fit the devices is a config mistake)."""
    sizes = [data, fsdp, tensor]
    if sizes.count(-1) > 1:
        raise ConfigError("mesh: at most one of mesh.data, mesh.fsdp, mesh.tensor may be -1")
    known = math.prod(s for s in sizes if s != -1)
    if -1 in sizes:
        if num_devices % known:
            raise ConfigError(f"mesh: {num_devices} devices are not divisible by the fixed axes' product {known}")
        sizes[sizes.index(-1)] = num_devices // known
    if math.prod(sizes) != num_devices:
        raise ConfigError(f"mesh: mesh.data*mesh.fsdp*mesh.tensor = {math.prod(sizes)} but there are "
                          f"{num_devices} devices")
    return tuple(sizes)


def make_mesh(data: int = -1, fsdp: int = 1, tensor: int = 1, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A (data, fsdp, tensor) mesh over `devices` (default: all global devices)."""
    devices = list(jax.devices() if devices is None else devices)
    shape = resolve_axis_sizes(len(devices), data, fsdp, tensor)
    try:
        device_array = jax.experimental.mesh_utils.create_device_mesh(shape, devices=devices)
    except Exception:  # noqa: BLE001 -- simulated / heterogeneous devices: plain row-major order
        device_array = np.asarray(devices).reshape(shape)
    return Mesh(device_array, MESH_AXES)


def mesh_from_config(mesh_config) -> Mesh:
    return make_mesh(mesh_config.data, mesh_config.fsdp, mesh_config.tensor)


def _axis_size(mesh: Mesh, mesh_axes) -> int:
    if mesh_axes is None:
        return 1
    names = (mesh_axes,) if isinstance(mesh_axes, str) else mesh_axes
    return math.prod(mesh.shape[n] for n in names)


def logical_to_spec(logical_axes: Sequence[str | None], shape: Sequence[int], mesh: Mesh) -> PartitionSpec:
    """PartitionSpec for an array with these logical axes; a dimension that the mesh axis
    does not divide stays replicated (tiny test models on many devices)."""
    if len(logical_axes) != len(shape):
        raise ValueError(f"logical axes {logical_axes} do not match shape {tuple(shape)}")
    spec, used = [], set()
    for name, dim in zip(logical_axes, shape):
        mesh_axes = LOGICAL_AXIS_RULES.get(name) if name is not None else None
        names = () if mesh_axes is None else ((mesh_axes,) if isinstance(mesh_axes, str) else tuple(mesh_axes))
        names = tuple(n for n in names if mesh.shape.get(n, 1) > 1 and n not in used)
        if not names or dim % _axis_size(mesh, names):
            spec.append(None)
            continue
        used.update(names)
        spec.append(names[0] if len(names) == 1 else names)
    return PartitionSpec(*spec)


def named_sharding(logical_axes: Sequence[str | None], shape: Sequence[int], mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, logical_to_spec(logical_axes, shape, mesh))


def batch_sharding(mesh: Mesh, ndim: int) -> NamedSharding:
    """Leading dimension split over the data-parallel axes (data and fsdp), the rest replicated."""
    return NamedSharding(mesh, PartitionSpec(("data", "fsdp"), *([None] * (ndim - 1))))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())
