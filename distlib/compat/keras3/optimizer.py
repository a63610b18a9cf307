"""What a session's saved state (``distlib/saved_state/``) reads of a Keras 3 optimizer that Keras keeps private.

A Keras 3 optimizer creates its slots (Adam's moments, SGD's momentum) on its first ``apply_gradients``, for the
variables it is given; nothing public says which ones. To restore a standalone optimizer's slots right away (not on
its next step), the save records the namespace object whose ``trainable_variables`` the optimizer was built for,
and the restore builds the rebuilt optimizer for that object's variables under the optimizer's strategy:

- ``built_for(optimizer)``: the variables it was built for (``BaseOptimizer._trainable_variables``), or None;
- ``strategy_of(optimizer)``: the strategy it was created under (``TFOptimizer._distribution_strategy``).

No upstream issue: Keras has no public accessor for either. Group ``keras3/optimizer`` in ``internals``.
"""

from __future__ import annotations

from typing import Any

from nbworkers.distlib.compat import internals


def check() -> bool:
    """Warn once when a symbol is gone (a restored optimizer then gets its slots on its next step instead)."""
    return internals.available("keras3/optimizer", "a restored optimizer's slots come back on its next step only")


def built_for(optimizer: Any) -> list[Any] | None:
    """The variables a built Keras 3 optimizer made its slots for (None: not built, or not a Keras 3 optimizer)."""
    if getattr(optimizer, "built", None) is not True:
        return None
    variables = getattr(optimizer, "_trainable_variables", None)
    return None if variables is None else list(variables)


def strategy_of(optimizer: Any) -> Any:
    """The tf.distribute strategy a Keras 3 optimizer was created under (None: not known)."""
    return getattr(optimizer, "_distribution_strategy", None)
