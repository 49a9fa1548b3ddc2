"""Sites: the named points of a transformer's residual stream, for both of mechjax's transformers
(:class:`mechjax.models.transformer.Transformer` and the pretrained
:class:`mechjax.models.pretrained.model.DecoderLM`): steering a vector in at one, checking the
sites a ``steer`` names, and reading the attention weights the layers sow.

Both models take ``steer={site: v}`` in ``apply`` and add ``v`` there (broadcast over batch and
positions); :func:`steer_at` builds that argument for one site out of many with a traced index, so
one compiled program steers at every site.
"""

from __future__ import annotations

import re
from typing import Sequence

import jax
import jax.numpy as jnp


def residual_sites(names: Sequence[str]) -> list[str]:
  """The distinct points of the residual stream among a model's site names (in stream order):
  every ``resid_*`` site but ``resid_pre_{l+1}``, which is the same point as ``resid_post_l``."""
  return [
    s
    for s in names
    if s.startswith("resid_") and (s == "resid_pre_0" or not s.startswith("resid_pre"))
  ]


def steer_at(sites: Sequence[str], index: jax.Array, v: jax.Array) -> dict[str, jax.Array]:
  """The ``steer`` argument of a model's ``apply`` that adds ``v`` at one site and zeros at the
  others.

  Args:
    sites: the sites the dict covers, in a fixed order (the same pytree for every ``index``).
    index: the position in ``sites`` of the site to steer; it may be traced, so one compiled
      program steers at every site.
    v: the ``(d,)`` vector to add there.
  """
  return {s: jnp.where(i == index, 1.0, 0.0) * v for i, s in enumerate(sites)}


def check_steer(steer: dict | None, sites: Sequence[str]) -> dict:
  """``steer`` as a dict (``{}`` for None), after refusing in one line any site it names that the
  model does not have, listing the sites it has."""
  steer = dict(steer or {})
  unknown = sorted(set(steer) - set(sites))
  if unknown:
    raise ValueError(f"cannot steer at {unknown}; sites are {list(sites)}")
  return steer


def attention_patterns(model, params, tokens_BxT) -> jax.Array:
  """Every layer's attention weights, ``(layers, B, heads, T_query, T_key)``, as the layers sow
  them (``intermediates["attn_{l}"]["attention"]``). ``params`` may be the params alone or the
  variables ``{"params": params}``."""
  variables = params if "params" in params else {"params": params}
  _, state = model.apply(variables, tokens_BxT, mutable=["intermediates"])
  found = state["intermediates"]
  layers = sorted(int(m.group(1)) for k in found if (m := re.fullmatch(r"attn_(\d+)", k)))
  if not layers:
    raise ValueError(f"{type(model).__name__} sowed no attention weights (no attn_<l> layers)")
  return jnp.stack([found[f"attn_{l}"]["attention"][0] for l in layers])
