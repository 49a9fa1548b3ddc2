"""The pretrained studies' reports, on made-up summaries: the verdicts say what a researcher must
know first, and the figures draw every restriction and mark what cannot be trusted
(mechjax.studies.llc.pretrained_llc_report and rotation.pretrained_polymorphism_report)."""

import numpy as np

from mechjax.studies.llc import pretrained_llc_report as llc_report
from mechjax.studies.rotation import pretrained_polymorphism_report as poly_report


def llc_summary(**changes):
  mixed = {"rhat_max": 1.003, "ess_min": 900.0, "share_failing": 0.0}
  row = lambda llc, se: dict(
    llc=llc, llc_se=se, chi_mean=0.1, chi_abs_mean=0.1, chi_se_mean=0.01,
    resolved_fraction=0.5, mixing=mixed, weights=10,
  )  # fmt: skip
  comps = {"all": row(80.2, 0.9)}
  for layer in range(2):
    for head in range(3):
      comps[f"attn_{layer}.head_{head}"] = row(1.0 + head, 0.1)
    comps[f"mlp_{layer}"] = row(5.0, 0.5)
  comps["attn_1.head_2"] = row(-3.0, 0.2)  # negative beyond 2 s.e.
  comps["attn_0.head_1"] = row(-0.1, 0.2)  # below zero, within its error
  summary = {
    "model": {"family": "gpt_neox", "layers": 2, "d_model": 32, "vocab_size": 50304,
              "parameters": 70_426_624},
    "nbeta": 15.4, "loss_star": 3.2, "uniform_loss": float(np.log(50304)), "eval_windows": 256,
    "probe_tokens": 14, "chains": 4, "draws": 200, "evaluated_draws": 34,
    "seconds": {"total": 3725.0}, "components": comps,
  }  # fmt: skip
  return {**summary, **changes}


def test_the_llc_verdict_leads_with_the_fit_mixing_and_negative_llcs():
  said = " ".join(llc_report.verdict(llc_summary()))
  assert "Loss at w*: 3.200 nats per token on the 256 evaluation windows, against 10.826" in said
  assert "far better than chance" in said and "every restriction's χ passes R̂" in said
  assert "The whole model's LLC is 80.2 ± 0.9" in said
  assert (
    "1 of 9 restrictions have an LLC below zero beyond two standard errors (attn_1.head_2;" in said
  )
  assert "4 chains × 200 draws (34 evaluated) for each of 9 restrictions" in said
  assert "in 1 h 02 min" in said, said
  # A checkpoint at chance, and chains that did not mix, are said so.
  s = llc_summary(loss_star=10.7)
  s["components"]["mlp_1"]["mixing"] = {"rhat_max": 1.2, "ess_min": 30.0, "share_failing": 0.97}
  said = " ".join(llc_report.verdict(s))
  assert "close to chance: the checkpoint does not fit this corpus" in said
  assert "the chains did not mix. In mlp_1, 97% of the probe tokens' χ fail" in said
  lines = llc_report.report(s)
  assert "(negative)" in next(line for line in lines if "attn_1.head_2" in line)
  assert "(negative)" not in next(line for line in lines if "attn_0.head_1" in line)
  # One chain: no standard error, so the verdict claims none.
  s = llc_summary(chains=1)
  for c in s["components"].values():
    c["llc_se"], c["mixing"] = None, {"rhat_max": None, "ess_min": None, "share_failing": None}
  said = " ".join(llc_report.verdict(s))
  assert "The whole model's LLC is 80.2 (one chain: no error)." in said
  assert "below zero (with one chain, no standard error says by how much)" in said
  assert "one chain: mixing cannot be judged" in said and "1 chain × 200 draws" in said


def test_the_llc_figure_places_heads_and_mlps_on_a_grid(tmp_path):
  heads, mlps, others = llc_report.grid(
    ["all", "attn_0.head_1", "l2h3", "mlp_0", "l2 mlp", "embed"]
  )
  assert heads == {(0, 1): "attn_0.head_1", (2, 3): "l2h3"}
  assert mlps == {0: "mlp_0", 2: "l2 mlp"} and others == ["all", "embed"]
  path = llc_report.llc_figure(llc_summary(), str(tmp_path / "llc.png"))
  assert (tmp_path / "llc.png").stat().st_size > 10_000 and path.endswith("llc.png")


def test_the_top_probe_tokens_are_the_largest_chi_with_their_context(tmp_path):
  probes = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])  # 2 windows of 4 tokens: 3 losses each
  chi = np.zeros((2, 6))
  chi[0, 4] = -5.0  # window 1, position 1: predicts token 7 after "5 6"
  chi[0, 0] = 2.0  # window 0, position 0: predicts 2 after "1"
  chi[1, 2] = 1.0  # window 0, position 2: predicts 4 after "1 2 3"
  decode = lambda ids: " ".join(f"t{i}" for i in ids)
  top = llc_report.top_tokens(chi, probes, decode, k=2)
  assert top[0] == [
    {"token": "t7", "context": "t5 t6", "chi": -5.0},
    {"token": "t2", "context": "t1", "chi": 2.0},
  ]
  assert top[1][0] == {"token": "t4", "context": "t1 t2 t3", "chi": 1.0}
  names = ["all", "attn_0.head_0"]
  llc_report.chi_figure(names, chi * np.array([[1.0], [1e-6]]), top, str(tmp_path / "chi.png"))
  assert (tmp_path / "chi.png").stat().st_size > 10_000


def poly_summary():
  haar = {k: {"p_value": p, "value": 8.0, "null_mean": 8.0, "null_sd": 0.03}
          for k, p in zip(poly_report.HAAR_SHOWN, (0.5, 0.01, 0.7))}  # fmt: skip

  def site(agreement, native, native_se):
    return {
      "rotation_split_half_agreement": agreement, "determined": agreement >= 0.9,
      "fit_tokens_needed": poly_report.fit_tokens_needed(256, agreement),
      "cross_covariance_rank": 32, "identity_ev_held_out": -1.0, "aligned_ev_held_out": 0.3,
      "identity_ev_held_out_se": 0.05, "aligned_ev_held_out_se": 0.04,
      "frobenius_to_identity": 8.0, "haar": haar,
      "steer_effect": {"native": native, "aligned": 0.5 * native, "raw": 0.0, "random": 0.01},
      "steer_effect_se": {"native": native_se, "aligned": 0.01, "raw": 0.01, "random": 0.01},
      "steer_ratio": {k: (0.5 if k == "aligned" else 0.0)
                      if poly_report.clearly_positive(native, native_se) else None
                      for k in poly_report.TRANSFERRED},
    }  # fmt: skip

  return {
    "models": {m: {"family": "gpt_neox", "layers": 2} for m in "ab"},
    "d_model": 32, "sqrt_2d": 8.0, "seq_len": 8, "fit_tokens": 256, "held_out_tokens": 64,
    "steer_token_text": " the",
    "sites": {"resid_pre_0": site(0.23, -0.118, 0.05), "resid_post_0": site(0.97, 0.4, 0.05)},
  }  # fmt: skip


def test_polymorphism_draws_no_haar_verdict_from_an_undetermined_rotation(tmp_path):
  assert poly_report.fit_tokens_needed(256, 0.23) == 1972  # 256 · 0.77 / 0.1, rounded up
  assert poly_report.fit_tokens_needed(256, 0.95) is None
  assert poly_report.clearly_positive(0.4, 0.05) and not poly_report.clearly_positive(0.05, 0.05)
  said = poly_report.verdict(poly_summary())
  assert said[0].startswith("R is determined at 1 of 2 sites; at 0 of them it looks Haar-random")
  pre, post = said[1], said[2]
  assert "resid_pre_0: R not determined (split-half agreement 0.23 < 0.9 at 8 fit tokens" in pre
  assert "about 1,972+ would determine it): no Haar verdict" in pre
  assert "no clear effect (Δlog p -0.118 ± 0.050): no ratio" in pre
  assert "Haar" not in pre.split("no Haar verdict")[1]
  assert "not Haar-like by signed_permutation_distance (p < 0.05)" in post
  assert "through R steers B 0.50× as much as B's own" in post
  lines = poly_report.report(poly_summary())
  assert "R not determined: no Haar verdict" in lines[1] and "not clearly positive" in lines[1]
  assert "Haar p (‖R−I‖, perm, kurt) 0.50 0.01 0.70" in lines[2] and "aligned  0.50" in lines[2]
  poly_report.plot(poly_summary(), str(tmp_path / "alignment.png"))
  assert (tmp_path / "alignment.png").stat().st_size > 10_000
  # With no site determined, the verdict says how many fit windows would do.
  s = poly_summary()
  s["sites"].pop("resid_post_0")
  assert "--fit_windows=247" in poly_report.verdict(s)[0]
