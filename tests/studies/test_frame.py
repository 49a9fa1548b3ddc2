"""The study frame: the workdir contract applies to ``study.run`` called from Python, stages are
cached, and the ending writes figures, files and summary.json (mechjax.studies.frame)."""

import dataclasses
import json
import pathlib

import pytest

from mechjax import config
from mechjax import studies
from mechjax.studies import frame
from mechjax.studies.fourier import fourier_phase
from mechjax.studies.workdir import WorkdirError
from tests.helpers import check_report


@dataclasses.dataclass(frozen=True)
class Config(config.Settings):
  run: config.RunSettings = config.group(config.RunSettings(steps=10))
  scale: float = config.setting(2.0, "A number the study multiplies.", check=config.positive)


CALLS = []


def science(cfg: Config, ctx: frame.Context) -> frame.Outputs:
  """A study without training: one cached stage, one figure, one extra file."""
  value = ctx.stage(
    "product", lambda: CALLS.append("stage") or {"value": cfg.scale * cfg.run.steps}
  )

  def figures(folder):
    path = f"{folder}/plot.png"
    pathlib.Path(path).write_bytes(b"png")
    return [path]

  return frame.Outputs(
    {"value": value["value"]}, figures=figures, files={"notes.md": "written last but one"}
  )


run = frame.Study("toy", Config, science).run


def test_python_call_writes_config_and_refuses_a_mismatched_resume(tmp_path):
  CALLS.clear()
  summary = run(Config(), tmp_path, progress=False)
  assert sorted(summary.pop("seconds")) == ["product", "total"]  # the frame times each stage
  assert summary == {"value": 20.0, "figures": ["plot.png"]}
  summary = json.loads((tmp_path / "summary.json").read_text())
  assert json.loads((tmp_path / "config.json").read_text()) == {**Config().to_flat()}
  assert (tmp_path / "notes.md").read_text() == "written last but one\n" and (
    tmp_path / "figures/plot.png"
  ).exists()
  assert check_report(tmp_path, captioned=False) == ["figures/plot.png"]
  with pytest.raises(WorkdirError, match=r"--scale=2.0 \(now 3.0\)"):
    run(Config(scale=3.0), tmp_path, progress=False)
  # A finished run is not recomputed; its summary comes back from disk.
  assert run(Config(), tmp_path, progress=False) == summary and CALLS == ["stage"]
  # An interrupted analysis (no summary.json) reloads its stage instead of recomputing it.
  (tmp_path / "summary.json").unlink()
  assert run(Config(), tmp_path, progress=False)["value"] == 20.0 and CALLS == ["stage"]
  assert run(Config(scale=3.0), tmp_path, overwrite=True, progress=False)["value"] == 30.0
  assert CALLS == ["stage", "stage"]


def numpy_science(cfg: Config, ctx: frame.Context) -> frame.Outputs:
  """A study whose summary holds what a study's analysis returns: NumPy numbers and arrays, a tuple,
  an integer key and a NaN."""
  import numpy as np

  return frame.Outputs(
    {"x": np.arange(2.0) * cfg.scale, "n": np.int64(3), "t": (1, 2), 4: float("nan")}
  )


numpy_study = frame.Study("numpy_toy", Config, numpy_science).run


def test_a_first_run_returns_the_summary_a_rerun_reads_back(tmp_path):
  first = numpy_study(Config(), tmp_path, progress=False)
  assert first.pop("seconds").keys() == {"total"}
  assert first == {"x": [0.0, 2.0], "n": 3, "t": [1, 2], "4": None}
  assert type(first["n"]) is int
  again = numpy_study(Config(), tmp_path, progress=False)
  assert again.pop("seconds").keys() == {"total"} and again == first


def timing_science(cfg: Config, ctx: frame.Context) -> frame.Outputs:
  """A study that writes summary["seconds"] itself."""
  return frame.Outputs({"seconds": 1.0})


timing_study = frame.Study("timing_toy", Config, timing_science).run


def test_the_frame_owns_summary_seconds(tmp_path):
  with pytest.raises(ValueError, match=r"ctx.timed\(name\)"):
    timing_study(Config(), tmp_path, progress=False)


def test_rows_stage_appends_per_chunk_and_resumes_after_the_last_whole_line(tmp_path):
  ctx = frame.Context(str(tmp_path), progress=False)
  calls = []

  def compute(items):
    calls.append(items)
    return {i: [{"item_squared": i * i, "half": i / 2}] for i in items}

  first = ctx.rows("r", [1, 2, 3], compute, chunk=2)
  assert first == {i: [{"item_squared": i * i, "half": i / 2}] for i in (1, 2, 3)}
  assert calls == [[1, 2], [3]] and "r" in ctx.seconds
  lines = (tmp_path / "r.jsonl").read_text().splitlines()
  assert [json.loads(line)["item"] for line in lines] == [1, 2, 3]
  # Item 3's line torn by a kill, and a fourth item asked for: only those two are computed.
  (tmp_path / "r.jsonl").write_text("\n".join(lines[:2]) + "\n" + lines[2][:7])
  calls.clear()
  assert ctx.rows("r", [1, 2, 3, 4], compute, chunk=2) == {
    **first,
    4: [{"item_squared": 16, "half": 2.0}],
  }
  assert calls == [[3, 4]]
  with pytest.raises(ValueError, match=r"returned rows for \[5\]"):
    ctx.rows("other", [6], lambda items: {5: []})


def test_a_non_config_or_a_foreign_folder_is_refused(tmp_path):
  with pytest.raises(TypeError, match="the study's Config"):
    run({"scale": 2.0}, tmp_path)
  (tmp_path / "precious.txt").write_text("keep")
  with pytest.raises(WorkdirError, match="holds no mechjax run"):
    run(Config(), tmp_path, overwrite=True)
  assert (tmp_path / "precious.txt").exists()


def test_stage_formats(tmp_path):
  ctx = frame.Context(str(tmp_path), progress=False)
  import numpy as np

  arrays = ctx.stage("a", lambda: {"x": np.arange(3)}, fmt="npz")
  again = ctx.stage("a", lambda: pytest.fail("recomputed"), fmt="npz")
  np.testing.assert_array_equal(arrays["x"], again["x"])
  with pytest.raises(ValueError, match="fmt must be one of"):
    ctx.stage("b", dict, fmt="pickle")


@pytest.mark.slow
def test_a_real_study_from_python_obeys_the_same_contract(tmp_path):
  cfg = fourier_phase.Config().replace(
    tasks=("amplitude",),
    width=8,
    eval_samples=64,
    num_seeds=1,
    batch_size=8,
    steps=20,
    log_every=10,
    checkpoint_every=10,
  )
  summary = fourier_phase.run(cfg, tmp_path, progress=False)
  saved = json.loads((tmp_path / "config.json").read_text())
  assert (
    saved["steps"] == 20 and saved["tasks"] == ["amplitude"] and saved["alpha"] == [0.0, 1.0, 2.0]
  )
  assert (tmp_path / "summary.json").exists() and summary["figures"]
  assert sorted(check_report(tmp_path)) == sorted(f"figures/{f}" for f in summary["figures"])
  assert any("final test acc" in line for line in fourier_phase.report(summary))
  with pytest.raises(WorkdirError, match=r"--width=8 \(now 16\)"):
    fourier_phase.run(cfg.replace(width=16), tmp_path, progress=False)


def study_modules() -> dict[str, object]:
  """Every module of mechjax/studies/ that exports a STUDY."""
  return studies.all_studies()


def test_every_study_has_one_name_from_experiment_file_to_workdir():
  """A study's module, its STUDY's name (the default workdir is runs/<name>) and its experiment
  file share one name, and every experiment file runs the study of its name."""
  import os
  import re

  from tests.helpers import ROOT

  modules = study_modules()
  assert {"fourier_phase", "tensor_similarity_backdoor", "template"} <= set(modules)
  for name, module in modules.items():
    assert isinstance(module.STUDY, frame.Study) and module.STUDY.name == name, name
    assert module.run == module.STUDY.run and module.STUDY.config is module.Config, name
  folder = os.path.join(ROOT, "experiments")
  experiments = {f[:-3] for f in os.listdir(folder) if f.endswith(".py") and f != "__init__.py"}
  assert experiments == set(modules)
  for name in experiments:
    source = pathlib.Path(folder, f"{name}.py").read_text()
    assert re.search(rf"cli\.experiment\({name}\.STUDY, __name__\)", source), name


def test_studies_are_grouped_by_question_and_found_by_name():
  """Every study but the template lives in a subpackage of mechjax.studies (its question), and its
  one name finds it: studies.find, and ``from mechjax.studies import <name>``."""
  modules = study_modules()
  for name, module in modules.items():
    depth = module.__name__.count(".")
    assert depth == (2 if name == "template" else 3), module.__name__
    assert studies.find(name) is module
  from mechjax.studies import patterning_parens  # the facade, from mechjax/studies/patterning/

  assert patterning_parens is modules["patterning_parens"]
  assert patterning_parens.__name__ == "mechjax.studies.patterning.patterning_parens"
  with pytest.raises(ValueError, match=r"no study module 'parens'.*'patterning_parens'"):
    studies.find("parens")
  with pytest.raises(ImportError):
    from mechjax.studies import no_such_study  # noqa: F401


def test_every_study_has_the_tiny_config_of_its_end_to_end_test():
  """tests.helpers.tiny_configs (the TINY_CONFIGS of the test modules, which .ci/tiny_summaries.py
  runs) names every study once, and each study's Config takes its tiny config."""
  from tests.helpers import tiny_configs

  modules, tiny = study_modules(), tiny_configs()
  assert set(tiny) == set(modules)
  for name, settings in tiny.items():
    cfg = modules[name].Config().replace(**settings)
    assert isinstance(cfg, modules[name].Config), name


def test_a_new_run_that_fails_before_writing_anything_leaves_nothing_to_refuse(tmp_path):
  def failing(cfg, ctx, stage_first=False):
    if stage_first:
      ctx.stage("done", lambda: {"x": 1})
    raise FileNotFoundError("the checkpoint is missing")

  broken = frame.Study("toy", Config, failing).run
  for folder, existed in ((tmp_path / "new", False), (tmp_path / "empty", True)):
    if existed:
      folder.mkdir()
    with pytest.raises(FileNotFoundError, match="the checkpoint is missing"):
      broken(Config(), folder, progress=False)
    assert folder.exists() == existed and not (existed and any(folder.iterdir()))
    # The corrected command, with other settings, starts without overwrite.
    assert run(Config(scale=3.0), folder, progress=False)["value"] == 30.0
  # A run that wrote a stage before it failed keeps it, and resumes.
  keeper = frame.Study("toy", Config, lambda c, x: failing(c, x, stage_first=True)).run
  with pytest.raises(FileNotFoundError):
    keeper(Config(), tmp_path / "kept", progress=False)
  assert (tmp_path / "kept" / "done.json").exists() and (tmp_path / "kept" / "config.json").exists()
  with pytest.raises(WorkdirError, match="other settings"):
    run(Config(scale=3.0), tmp_path / "kept", progress=False)
