"""The built-in training strategies, one module each; importing this package registers them in this order.

Adding one is its module here and one import line below.
"""

from greso_jax.selection.strategies import (vanilla, dynamic_sampling, greso, aero, mopps,  # noqa: F401  (registers)
                                            posterior)
