"""Cross-host helpers: gather host-local NumPy data, fetch global arrays, and check that state
which must be identical on every host (the selector's history) really is."""

from __future__ import annotations

import hashlib

import jax
import numpy as np


class HostDivergenceError(RuntimeError):
    """State that every host must hold identically differs between hosts."""


def is_multihost() -> bool:
    return jax.process_count() > 1


def allgather(x: np.ndarray) -> np.ndarray:
    """Stacks each host's equally shaped array: [P, ...] (P = 1 on a single host)."""
    x = np.asarray(x)
    if not is_multihost():
        return x[None]
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x, tiled=False))


def allgather_ragged(x: np.ndarray) -> list[np.ndarray]:
    """Each host's 1-D array, whatever its length, on every host: a list of P arrays in host order."""
    x = np.asarray(x).reshape(-1)
    sizes = allgather(np.array([x.size], np.int64))[:, 0]
    padded = np.zeros(max(int(sizes.max()), 1), x.dtype)
    padded[:x.size] = x
    return [row[:n] for row, n in zip(allgather(padded), sizes)]


def to_host(x) -> np.ndarray:
    """A (possibly cross-host sharded) global jax array as a full NumPy array on every host."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(jax.device_get(x))


def fingerprint(state: dict) -> np.ndarray:
    """A 128-bit digest of a flat dict of arrays and scalars, as two int64 words."""
    digest = hashlib.blake2b(digest_size=16)
    for key in sorted(state):
        value = np.ascontiguousarray(np.asarray(state[key]))
        digest.update(key.encode())
        digest.update(str(value.dtype).encode() + str(value.shape).encode())
        digest.update(value.tobytes())
    return np.frombuffer(digest.digest(), np.int64).copy()


def check_identical_across_hosts(state: dict, what: str, step: int) -> None:
    """Raises HostDivergenceError naming the hosts whose `state` differs from host 0's."""
    prints = allgather(fingerprint(state))
    differing = [i for i in range(len(prints)) if not np.array_equal(prints[i], prints[0])]
    if differing:
        raise HostDivergenceError(f"step {step}: {what} differs between hosts: host(s) {differing} disagree "
                                  f"with host 0. Every host must make identical selection decisions; stopping.")


def put(x, sharding):
    """`jax.device_put` that also works when `sharding` spans several processes: host data
    (identical on every process) is placed shard by shard; global arrays are resharded."""
    if sharding.is_fully_addressable or (isinstance(x, jax.Array) and not x.is_fully_addressable):
        return jax.device_put(x, sharding)
    if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        return jax.random.wrap_key_data(put(jax.random.key_data(x), sharding), impl=jax.random.key_impl(x))
    host = np.asarray(jax.device_get(x))
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def put_tree(tree, shardings):
    """`put` over a pytree; `shardings` is one sharding or a pytree prefix of `tree` (as for
    `jax.device_put`: e.g. one sharding per nnx Variable)."""
    if all(s.is_fully_addressable for s in jax.tree.leaves(shardings)):
        # Leaves already in place are kept and the rest moved in one batched transfer: device_put
        # has a fixed cost per leaf even for a leaf already in place, which adds up over a model.
        leaves, treedef = jax.tree.flatten(tree)
        targets = jax.tree.leaves(jax.tree.broadcast(shardings, tree))
        moving = [i for i, (x, s) in enumerate(zip(leaves, targets))
                  if not (isinstance(x, jax.Array) and x.sharding == s)]
        for i, moved in zip(moving, jax.device_put([leaves[i] for i in moving], [targets[i] for i in moving])):
            leaves[i] = moved
        return jax.tree.unflatten(treedef, leaves)
    if isinstance(shardings, jax.sharding.Sharding):
        return jax.tree.map(lambda x: put(x, shardings), tree)
    return jax.tree.map(lambda s, sub: jax.tree.map(lambda x: put(x, s), sub), shardings, tree)
