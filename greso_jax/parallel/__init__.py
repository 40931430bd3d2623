"""Meshes, sharding rules and multi-host initialisation."""

from greso_jax.parallel.sharding import (LOGICAL_AXIS_RULES, MESH_AXES, batch_sharding, logical_to_spec,
                                         make_mesh, mesh_from_config, named_sharding, replicated)

__all__ = ["LOGICAL_AXIS_RULES", "MESH_AXES", "batch_sharding", "logical_to_spec", "make_mesh",
           "mesh_from_config", "named_sharding", "replicated"]
