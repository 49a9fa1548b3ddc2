"""Bilinear models, their weight format, and tensor similarity (fast subset of
theory/tensor_similarity.py)."""

import flax.linen as nn
import jax
import numpy as np
import pytest

from mechjax.models import bilinear as bl
from mechjax.similarity import baselines
from mechjax.similarity import depth_one
from mechjax.similarity import reference
from mechjax.similarity import representational as rep
from mechjax.similarity import tensor as ts
from theory import tensor_similarity as th


def _report(fn, *args):
  report = th.Report(verbose=False)
  with jax.enable_x64(True):
    fn(report, *args)
  failed = [name for name, ok in report.results.items() if not ok]
  assert report.results and not failed, failed
  return report


@pytest.mark.slow
def test_recursion_equals_brute_force_and_identities():
  rng = np.random.default_rng(0)
  _report(th.recursion_vs_brute_force, rng, 3)
  _report(th.one_only_for_equal_functions, rng, 3, 4)
  _report(th.log_space, rng, 3)


@pytest.mark.slow
def test_invariances_of_a_residual_bilinear_net():
  r = _report(th.invariances, jax.random.PRNGKey(0), 4)
  assert len(r.results) == 13


@pytest.mark.slow
def test_single_layer_gaussian_and_multilinear_identity_match_monte_carlo():
  rng = np.random.default_rng(1)
  key = jax.random.PRNGKey(1)
  _report(th.gaussian_single_layer, rng, key, 3, 40_000)
  _report(th.multilinear_identity, rng, key, 3, 40_000)


@pytest.mark.slow
def test_a_wrong_recursion_is_caught(monkeypatch):
  """Dropping the cross term of the node-wise symmetrisation breaks recursion = brute force."""
  core = depth_one.bilinear_core
  monkeypatch.setattr(
    depth_one, "bilinear_core", lambda la, ra, lb, rb, g, sym: core(la, ra, lb, rb, g, 0)
  )
  ts._log_gram.clear_cache()  # compiled programs hold the correct core
  try:
    report = th.Report(verbose=False)
    with jax.enable_x64(True):
      th.recursion_vs_brute_force(report, np.random.default_rng(0), 3)
  finally:
    ts._log_gram.clear_cache()
  failed = [name for name, ok in report.results.items() if not ok]
  assert failed and all("node-wise symmetrised" in n or "BilinearNet" in n for n in failed), failed


@pytest.mark.parametrize(
  "make",
  [
    lambda: bl.BilinearNet(5, d_model=4, hidden=6, depth=2, use_bias=True),
    lambda: bl.BilinearNet(5, d_model=4, hidden=6, depth=1, residual=False),
    lambda: nn.Sequential([bl.Bilinear(8, project=False), bl.Linear(5)]),
    lambda: nn.Sequential([bl.Bilinear(8, hidden=3, use_bias=True), bl.Linear(5)]),
  ],
  ids=["net-bias-residual", "net-plain", "bilinear-linear", "bilinear-bias-linear"],
)
@pytest.mark.slow
def test_to_layers_computes_the_module_function(make):
  model = make()
  x = jax.random.normal(jax.random.PRNGKey(1), (7, 6))
  params = jax.jit(model.init)(jax.random.PRNGKey(0), x)
  layers = bl.to_layers(model, params)
  y = jax.jit(lambda layers, x: bl.apply_layers(layers, x, constant=bl.needs_constant(model)))(
    layers, x
  )
  np.testing.assert_allclose(y, jax.jit(model.apply)(params, x), rtol=1e-5, atol=1e-5)
  # the same with or without the outer "params" key
  assert jax.tree.structure(bl.to_layers(model, params["params"])) == jax.tree.structure(layers)


def test_slices_and_similarity_matrix_agree_with_the_materialised_tensors():
  rng = np.random.default_rng(2)
  nets = [
    [reference.random_bilinear(rng, 4, 3, 3), reference.random_linear(rng, 2, 3)] for _ in range(3)
  ]
  with jax.enable_x64(True):
    t = [np.asarray(reference.materialize(n)) for n in nets]
    cos = lambda u, v: np.vdot(u, v) / np.linalg.norm(u) / np.linalg.norm(v)
    want = np.array([[cos(u, v) for v in t] for u in t])
    np.testing.assert_allclose(ts.similarity_matrix(nets), want, atol=1e-12)
    np.testing.assert_allclose(
      ts.similarity_matrix(nets, slice_index=1),
      [[cos(u[1], v[1]) for v in t] for u in t],
      atol=1e-12,
    )
    np.testing.assert_allclose(
      ts.slice_similarity(nets[0], nets[1]), [cos(t[0][k], t[1][k]) for k in range(2)], atol=1e-12
    )
    # the gaussian measure of a one-bilinear-layer network folds the trailing linear layer
    single = depth_one.fold_single_bilinear(nets[0])
    np.testing.assert_allclose(
      ts.gaussian_inner(nets[0], nets[1]), ts.gaussian_inner([single], nets[1]), rtol=1e-12
    )


def test_baselines():
  rng = np.random.default_rng(3)
  a = [reference.random_bilinear(rng, 4, 3, 2)]
  perm = [bl.permute_hidden(a[0], np.array([1, 0, 3, 2]))]
  assert float(baselines.weight_cosine(a, a)) == pytest.approx(1.0)
  assert float(baselines.weight_cosine(a, perm)) < 0.99  # basis-dependent
  assert float(ts.tensor_similarity(a, perm)) == pytest.approx(1.0, abs=1e-6)
  y = rng.normal(size=(5, 3))
  assert float(baselines.output_cosine(y, 2 * y)) == pytest.approx(1.0, abs=1e-6)
  assert float(baselines.output_cosine(y, y + 1.0, center=True)) == pytest.approx(1.0, abs=1e-6)
  m = baselines.cosine_matrix(np.stack([y, -y, y]))
  np.testing.assert_allclose(m, [[1, -1, 1], [-1, 1, -1], [1, -1, 1]], atol=1e-6)
  acts = rng.normal(size=(3, 20, 4)).astype(np.float32)
  acts[2] = (
    2.0 * acts[0] @ np.linalg.qr(rng.normal(size=(4, 4)))[0] + 1.0
  )  # rotated, scaled, shifted
  c = baselines.cka_matrix(acts)
  want = [[float(rep.linear_cka(u, v)) for v in acts] for u in acts]
  np.testing.assert_allclose(c, want, atol=1e-5)
  assert c[0, 2] == pytest.approx(1.0, abs=1e-5) and 0 < c[0, 1] < 0.9


@pytest.mark.parametrize(
  "layers, message",
  [
    (
      [{"weight": np.zeros((3, 4))}, {"weight": np.zeros((2, 5))}],
      r"layer 1 \(linear\): input width 5 does not match "
      "layer 0's output width 3",
    ),
    (
      [{"left": np.zeros((4, 3)), "right": np.zeros((4, 2)), "out": np.zeros((2, 4))}],
      r"layer 0 \(bilinear\): expected left \(h, in\), right \(h, in\), out \(out, h\)",
    ),
    (
      [{"left": np.zeros((4, 3)), "right": np.zeros((4, 3)), "out": np.zeros((2, 5))}],
      "out \\(2, 5\\)",
    ),
    (
      [{"weight": np.zeros((3, 4))}, {"kernel": np.zeros((3, 3))}],
      "layer 1: unknown layer kind \\['kernel'\\]",
    ),
    ([{"weight": np.zeros((3, 4)), "bias": np.zeros(3)}], "layer 0: unknown layer kind"),
    ([{"weight": np.zeros(4)}], "layer 0 \\(linear\\): weight must be a matrix"),
    ([], "at least one layer"),
  ],
)
def test_malformed_weights_are_refused_with_the_layer_and_the_expected_shapes(layers, message):
  with pytest.raises(ValueError, match=message):
    ts.tensor_similarity(layers, layers)


def test_mismatched_networks_and_measures_are_refused():
  rng = np.random.default_rng(4)
  one = [reference.random_bilinear(rng, 4, 3, 2)]
  two = [reference.random_bilinear(rng, 4, 3, 3), reference.random_bilinear(rng, 4, 3, 2)]
  with pytest.raises(ValueError, match="same sequence of layer kinds"):
    ts.tensor_similarity(two, [reference.random_linear(rng, 3, 3), *two])
  # One bilinear layer each: the linear layers fold in, so differently arranged networks compare.
  other = [reference.random_linear(rng, 3, 3), reference.random_bilinear(rng, 4, 3, 2)]
  with jax.enable_x64(True):
    ta, tb = np.asarray(reference.materialize(one)), np.asarray(reference.materialize(other))
    assert float(ts.tensor_similarity(one, other)) == pytest.approx(
      np.vdot(ta, tb) / np.linalg.norm(ta) / np.linalg.norm(tb), rel=1e-12
    )
  with pytest.raises(ValueError, match="share input and output widths"):
    ts.tensor_similarity(one, [reference.random_bilinear(rng, 4, 3, 5)])
  with pytest.raises(ValueError, match="exactly one bilinear layer"):
    ts.tensor_inner(two, two, measure="gaussian")
  with pytest.raises(ValueError, match="network 1 has layers"):
    ts.similarity_matrix([one, [reference.random_bilinear(rng, 5, 3, 2)]])
  with pytest.raises(ValueError, match="measure must be one of"):
    ts.tensor_inner(one, one, measure="cosine")


def _single(rng, d, h, o):
  return [
    {
      "left": rng.normal(size=(h, d)) / np.sqrt(d),
      "right": rng.normal(size=(h, d)) / np.sqrt(d),
      "out": rng.normal(size=(o, h)) / np.sqrt(h),
    }
  ]


PATHS = {"hidden": (False, False), "hidden_gram": (False, True)}
PATHS |= {"forms": (True, False), "forms_gram": (True, True)}


@pytest.fixture
def force_path(monkeypatch):
  """Makes every depth-one call take one contraction path (and compile anew for it)."""

  def force(name):
    monkeypatch.setattr(depth_one, "_depth_one_plan", lambda *args: PATHS[name])
    depth_one.depth_one_similarity.clear_cache()
    depth_one.depth_one_gaussian_inner.clear_cache()
    depth_one.depth_one_matrix.cache_clear()

  yield force
  depth_one.depth_one_similarity.clear_cache()
  depth_one.depth_one_gaussian_inner.clear_cache()
  depth_one.depth_one_matrix.cache_clear()


@pytest.mark.parametrize("path", list(PATHS))
def test_every_depth_one_path_gives_the_same_inner_products(path, force_path):
  assert set(PATHS) == set(depth_one.DEPTH_ONE_PATHS)
  rng = np.random.default_rng(3)
  # An embedding made of two linear layers (7 → 4 → 5), the bilinear layer, a head (3 → 2).
  nets = [
    [
      reference.random_linear(rng, 4, 7),
      reference.random_linear(rng, 5, 4),
      reference.random_bilinear(rng, 6, 5, 3),
      reference.random_linear(rng, 2, 3),
    ]
    for _ in range(3)
  ]
  a, b = nets[0], reference.perturbed(rng, nets[0])
  with jax.enable_x64(True):
    # The reference values: the materialised tensors, and the path with everything folded.
    for sym in (True, False):
      ta, tb = (np.asarray(reference.materialize(n, symmetrize=sym)) for n in (a, b))
      want = np.vdot(ta, tb) / np.linalg.norm(ta) / np.linalg.norm(tb)
      force_path(path)
      assert float(ts.tensor_similarity(a, b, symmetrize=sym)) == pytest.approx(want, rel=1e-12)
      t = [np.asarray(reference.materialize(n, symmetrize=sym)) for n in nets]
      cos = lambda u, v: np.vdot(u, v) / np.linalg.norm(u) / np.linalg.norm(v)  # noqa: E731
      np.testing.assert_allclose(
        ts.similarity_matrix(nets, symmetrize=sym), [[cos(u, v) for v in t] for u in t], rtol=1e-12
      )
      np.testing.assert_allclose(
        ts.similarity_matrix(nets, symmetrize=sym, slice_index=1),
        [[cos(u[1], v[1]) for v in t] for u in t],
        rtol=1e-12,
      )
    for constant in (False, True):
      force_path("hidden")
      want = float(ts.gaussian_inner(a, b, constant=constant))
      want_sim = float(ts.tensor_similarity(a, b, measure="gaussian", constant=constant))
      force_path(path)
      assert float(ts.gaussian_inner(a, b, constant=constant)) == pytest.approx(want, rel=1e-12)
      got = ts.similarity_matrix(nets[:1] + [b], measure="gaussian", constant=constant)
      assert got[0, 1] == pytest.approx(want_sim, rel=1e-12)
      assert got[0, 1] < 0.999  # the two networks differ
      # And the expectation itself, against Monte Carlo, once per path.
      if constant:
        mean, se = reference.monte_carlo_inner(a, b, jax.random.key(0), 100_000, constant=True)
        assert abs(float(ts.gaussian_inner(a, b, constant=True)) - mean) < 4 * se


def test_the_cheapest_depth_one_path_is_chosen():
  def net(d, m, h, o=10):
    prefix = [{"weight": np.zeros((m, d))}] if m else []
    return [
      *prefix,
      {"left": np.zeros((h, m or d)), "right": np.zeros((h, m or d)), "out": np.zeros((o, h))},
    ]

  plan = lambda n, pairs=3, networks=2: depth_one._depth_one_plan(n, n, pairs, networks, True)  # noqa: E731
  # A wide input read through a narrow embedding (DeepMLP(784, 128, 256, 10)): keep the prefix,
  # through the hidden units; with a wide hidden layer, through the forms in the embedding's space.
  assert plan(net(784, 128, 256)) == (False, True)
  assert plan(net(784, 128, 2048)) == (True, True)
  assert plan(net(784, 128, 2048), pairs=136, networks=16) == (True, True)
  # A narrow input and a wide hidden layer: the forms, over the input.
  assert plan(net(64, 128, 2048)) == (True, False)
  assert plan(net(6, 0, 40)) == (True, False)
  # A wide input and a narrow hidden layer, no prefix: through the hidden units.
  assert plan(net(600, 0, 8, 3)) == (False, False)


def test_fold_single_bilinear_folds_linear_layers_on_both_sides():
  rng = np.random.default_rng(4)
  w0, w1, w2 = rng.normal(size=(4, 6)), rng.normal(size=(5, 4)), rng.normal(size=(2, 3))
  (core,) = _single(rng, 5, 7, 3)
  net = [{"weight": w0}, {"weight": w1}, core, {"weight": w2}]  # 6 → 4 → 5 → bilinear 3 → 2
  folded = depth_one.fold_single_bilinear(net)
  x = rng.normal(size=(9, 6))
  np.testing.assert_allclose(
    np.asarray(bl.apply_layers([folded], x)),
    np.asarray(bl.apply_layers(net, x)),
    rtol=2e-5,  # float32
  )


def test_similarity_matrix_compiles_once_per_architecture():
  rng = np.random.default_rng(5)
  nets = [_single(rng, 4, 6, 2) for _ in range(5)]
  first = ts.similarity_matrix(nets)
  program = ts._matrix_program(True, None)
  size = program._cache_size()
  again = ts.similarity_matrix([_single(rng, 4, 6, 2) for _ in range(5)])
  assert program._cache_size() == size  # the same shapes reuse the compiled program
  assert first.shape == again.shape == (5, 5) and not np.allclose(first, again)


@pytest.mark.parametrize("hidden, inputs", [(16, 4), (5, 20)])  # the quadratic forms; hidden units
def test_gaussian_similarity_matrix_equals_the_pairwise_similarity(hidden, inputs):
  rng = np.random.default_rng(7)
  nets = [
    [reference.random_bilinear(rng, hidden, inputs, 3), reference.random_linear(rng, 2, 3)]
    for _ in range(4)
  ]
  forms, _ = depth_one._depth_one_plan(nets[0], nets[0], 10, 4, True)
  assert forms == (hidden > inputs)  # both contraction paths are covered
  with jax.enable_x64(True):
    for constant in (False, True):
      got = ts.similarity_matrix(nets, measure="gaussian", constant=constant)
      want = [
        [float(ts.tensor_similarity(a, b, measure="gaussian", constant=constant)) for b in nets]
        for a in nets
      ]
      np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
      assert got.shape == (4, 4) and np.allclose(np.diag(got), 1.0)
      assert not np.allclose(got, np.eye(4))
  with pytest.raises(ValueError, match="measure must be one of"):
    ts.similarity_matrix(nets, measure="cosine")
  with pytest.raises(ValueError, match="slice_index is for measure='frobenius'"):
    ts.similarity_matrix(nets, measure="gaussian", slice_index=0)


@pytest.mark.parametrize("hidden, inputs", [(16, 4), (5, 20)])  # coefficient forms; hidden units
@pytest.mark.parametrize("symmetrize", [True, False])
def test_depth_one_frobenius_similarity_equals_the_materialised_tensors(hidden, inputs, symmetrize):
  rng = np.random.default_rng(8)
  a = [reference.random_linear(rng, inputs, 3), reference.random_bilinear(rng, hidden, inputs, 3)]
  b = [reference.random_linear(rng, inputs, 3), reference.random_bilinear(rng, hidden, inputs, 3)]
  with jax.enable_x64(True):
    ta, tb = (np.asarray(reference.materialize(n, symmetrize=symmetrize)) for n in (a, b))
    want = np.vdot(ta, tb) / np.linalg.norm(ta) / np.linalg.norm(tb)
    got = float(ts.tensor_similarity(a, b, symmetrize=symmetrize))
    assert got == pytest.approx(want, rel=1e-12, abs=1e-12)
    # The depth-2 recursion of the same networks with a second bilinear layer still runs.
    deeper = [*a, reference.random_bilinear(rng, 2, 3, 2)]
    assert abs(float(ts.tensor_similarity(deeper, deeper, symmetrize=symmetrize)) - 1) < 1e-12


def test_float32_deep_similarity_keeps_float32_precision():
  """``G`` is rescaled by powers of two, so the scale's exponent is an exact integer and a float32
  similarity of a deep network is as close to float64 as float32 allows. A natural-log scale ``c``
  of a few tens, rounded to float32 (ulp ~4e-6), carried its rounding into every similarity."""
  rng = np.random.default_rng(11)
  a = [{k: 3.0 * v for k, v in reference.random_bilinear(rng, 6, 5, 5).items()} for _ in range(3)]
  b = reference.perturbed(rng, a)
  e, _ = ts._log2_gram(a, b, True)
  assert float(e) > 40 and float(e) == round(float(e))  # a large scale, held as an integer
  with jax.enable_x64(True):
    want = float(ts.tensor_similarity(a, b))
  f32 = lambda net: [{k: np.float32(v) for k, v in layer.items()} for layer in net]  # noqa: E731
  got = ts.tensor_similarity(f32(a), f32(b))
  assert got.dtype == np.float32 and 0.1 < want < 0.99
  assert float(got) == pytest.approx(want, rel=1e-6)


def test_float32_similarity_matrix_through_the_forms_keeps_float32_precision(force_path):
  """The forms path sums ``o·in²`` products per pair; in one running float32 total that lost
  several times float32's rounding at ``in = 256`` (8e-7 relative), row sums do not."""
  from benchmarks import tensor_similarity as bench

  nets = [bench.as_layers(w, np.float64) for w in bench.walk(1, 256, 256)]  # DeepMLP(256, …)
  force_path("forms")
  with jax.enable_x64(True):
    want = ts.similarity_matrix(nets)
  f32 = [[{k: np.float32(v) for k, v in layer.items()} for layer in net] for net in nets]
  got = ts.similarity_matrix(f32)
  assert 0.1 < np.min(want) < 0.99
  np.testing.assert_allclose(got, want, rtol=5e-7)
