"""Calling the peer tools the same way from every benchmark that runs them."""

import os
import tempfile


def devinterp_llc(model, input_ids, **sampler) -> dict:
  """devinterp's ``llc`` on a torch ``model`` and rows of ``input_ids`` (a dataset with an
  ``input_ids`` column, its own next-token loss), its draws written to a temporary zarr store;
  ``sampler`` is passed through (``lr``, ``n_beta``, ``localization``, ``num_chains``, ...).
  Returns ``{"llc_mean", "llc_std"}``."""
  from datasets import Dataset
  from devinterp.slt.llc import llc

  dataset = Dataset.from_dict({"input_ids": input_ids.tolist()}).with_format("torch")
  with tempfile.TemporaryDirectory() as tmp:
    result = llc(model, dataset, {}, output_path=os.path.join(tmp, "samples.zarr"), **sampler)
  return {"llc_mean": float(result["llc_mean"]), "llc_std": float(result["llc_std"])}
