"""The Fourier study's spike axis: teachers vmapped with the seeds, spike by spike numbers."""

import numpy as np
import pytest

from mechjax.studies.fourier import fourier_phase as fp

TINY = dict(
  tasks=("spiked_principal",),
  alpha=(0.0, 2.0),
  shape=(8,),
  width=8,
  steps=40,
  log_every=20,
  checkpoint_every=40,
  num_seeds=2,
  eval_samples=64,
)
# The end-to-end run (.ci/tiny_summaries.py runs it too).
TINY_CONFIGS = {"fourier_phase": dict(TINY, num_spikes=2)}


@pytest.mark.slow
def test_spikes_train_in_one_program_and_spike_zero_is_the_one_spike_run(tmp_path):
  two = fp.run(
    fp.Config().replace(**TINY_CONFIGS["fourier_phase"]), tmp_path / "two", progress=False
  )
  # The one-spike run needs only the condition it is compared on.
  one_spike = fp.Config().replace(num_spikes=1, **{**TINY, "alpha": (2.0,)})
  one = fp.run(one_spike, tmp_path / "one", progress=False)
  c2 = two["conditions"]["spiked_principal_alpha2"]
  c1 = one["conditions"]["spiked_principal_alpha2"]
  assert c2["num_spikes"] == 2 and len(c2["per_spike"]["final_test_acc_mean"]) == 2
  spread = c2["spread_over_spikes"]
  assert spread["final_test_acc_min"] <= spread["final_test_acc_median"]
  assert spread["final_test_acc_median"] <= spread["final_test_acc_max"]
  # Spike 0's seeds are the one-spike run's seeds with the same teacher: the same numbers.
  assert c2["per_spike"]["final_test_acc_mean"][0] == c1["per_spike"]["final_test_acc_mean"][0]
  # The second spike is another teacher: its seeds see other data.
  per = c2["per_spike"]["final_test_acc_mean"]
  assert per[0] != per[1]
  gains = two["spike_gains_vs_alpha0"]["spiked_principal_alpha2"]
  np.testing.assert_allclose(
    gains["accuracy_gain_per_spike"],
    np.array(per)
    - two["conditions"]["spiked_principal_alpha0"]["per_spike"]["final_test_acc_mean"],
  )
  assert any("per spike (2 spikes)" in line for line in fp.report(two))


def test_member_keys_and_spikes_line_up():
  cfg = fp.Config().replace(num_spikes=3, num_seeds=2)
  cond = fp.Condition("spiked_principal_alpha1", "spiked_principal", 1.0)
  keys = fp.member_keys(cfg, cond)
  data = fp.member_data(cfg, cond)
  assert keys.shape[0] == 6 and data["u"].shape == (6, 32)
  np.testing.assert_array_equal(data["u"][0], data["u"][1])  # one spike per block of seeds
  assert not np.array_equal(data["u"][1], data["u"][2])
  amplitude = fp.Condition("amplitude_alpha0_vs_1", "amplitude", None)
  assert fp.member_data(cfg, amplitude) is None and fp.member_keys(cfg, amplitude).shape[0] == 2
