"""Settings defined once (mechjax.config) and the flags generated from them
(mechjax.cli)."""

import dataclasses

import pytest
from absl import flags as absl_flags

from mechjax import cli
from mechjax import config
from mechjax import studies
from mechjax.config import ConfigError
from mechjax.slt.settings import SGLDSettings

STUDIES = (
  "fourier_phase",
  "llc_dynamics",
  "patterning_induction",
  "patterning_parens",
  "patterning_parens_probe",
  "polymorphism",
  "tensor_similarity_backdoor",
  "tensor_similarity_grokking",
)
SHARED = {"workdir", "seed", "num_seeds", "steps", "checkpoint_every", "log_every", "overwrite"}


@dataclasses.dataclass(frozen=True)
class Toy(config.Settings):
  run: config.RunSettings = config.group(config.RunSettings(steps=50))
  width: int = config.setting(8, "Hidden units.", check=config.at_least(1))
  rates: tuple[float, ...] = config.setting(
    (0.1, 0.2), "Learning rates.", flag="rate", check=config.each(config.positive)
  )
  kind: str = config.setting("a", "Which kind.", choices=("a", "b"))
  sgld: SGLDSettings = config.group(
    SGLDSettings(step_size=1e-4, localization=10.0, batch_size=4),
    flags={"num_chains": "chains", "nbeta": "nbeta"},
  )

  def validate(self):
    if self.width > self.run.steps:
      raise ConfigError(("width", "run.steps"), "width must not exceed steps")


def _study(name):
  return studies.find(name)


def _parse(config_cls, *argv):
  fv = absl_flags.FlagValues()
  cli.define(config_cls, module_name="experiment", workdir="runs/x", flag_values=fv)
  fv(["experiment", *argv])
  return fv


def test_values_are_converted_to_their_types_and_checked():
  cfg = Toy(rates=[1, 2])
  assert cfg.rates == (1.0, 2.0) and isinstance(cfg.rates[0], float)
  with pytest.raises(ConfigError, match=r"^width=0: must be an integer >= 1$"):
    Toy(width=0)
  with pytest.raises(ConfigError, match=r"rates=0.1,-1.0: every value must be a finite number > 0"):
    Toy(rates=(0.1, -1))
  with pytest.raises(ConfigError, match="kind='c': must be one of a, b"):
    Toy(kind="c")
  with pytest.raises(ConfigError, match="width=2.5: must be an integer"):
    Toy(width=2.5)
  with pytest.raises(ConfigError, match="width, run.steps: width must not exceed steps"):
    Toy(width=60)
  Toy(width=4).check_at_most(("width", "sgld.batch_size"), "run.steps")  # 4 and 4 <= 50
  with pytest.raises(
    ConfigError, match=r"^run.steps, sgld.batch_size, width: run.steps=50, sgld.batch_size=4 must"
  ):
    Toy().check_at_most(("run.steps", "sgld.batch_size"), "width")  # 50 > 8
  with pytest.raises(ConfigError, match="step_size=-1.0: must be a finite number > 0"):
    SGLDSettings(step_size=-1, localization=1.0, batch_size=1)


def test_replace_and_the_flat_form_name_settings_by_flag():
  cfg = Toy().replace(steps=200, rate=[0.5], chains=8)
  assert cfg.run.steps == 200 and cfg.rates == (0.5,) and cfg.sgld.num_chains == 8
  assert cfg.sgld.step_size == 1e-4  # the group's other settings keep their values
  flat = cfg.to_flat()
  assert flat["steps"] == 200 and flat["rate"] == [0.5] and flat["chains"] == 8
  assert flat["sgld.mala"] is True  # a setting no flag exposes is still recorded, by its path
  assert Toy.from_flat(flat) == cfg
  cross = Toy().replace(**{"sgld.mala": False})
  assert cross.sgld.mala is False
  with pytest.raises(ConfigError, match="not a setting of Toy"):
    Toy().replace(bogus=1)
  # A refusal inside a group, or across groups, names the settings by their flags.
  with pytest.raises(ConfigError, match=r"^chains=0: must be an integer >= 1"):
    Toy().replace(chains=0)
  with pytest.raises(ConfigError, match=r"^width, steps: "):
    Toy().replace(width=100)


def test_a_config_with_required_settings_replaces_and_refuses_by_name():
  from mechjax.slt.settings import SGLDSettings

  s = SGLDSettings(step_size=1e-4, localization=100.0, batch_size=8)  # three have no default
  assert s.replace(num_chains=2) == dataclasses.replace(s, num_chains=2)
  with pytest.raises(ConfigError, match="num_chain: not a setting of SGLDSettings"):
    s.replace(num_chain=2)


def test_adding_a_setting_is_one_field():
  @dataclasses.dataclass(frozen=True)
  class Grown(Toy):
    depth: int = config.setting(3, "Layers.", check=config.at_least(1))

  fv = _parse(Grown, "--depth=5")
  assert cli.config_from_flags(Grown, fv).depth == 5
  assert "Layers." in fv.module_help("experiment") and Grown().to_flat()["depth"] == 3
  with pytest.raises(cli.FlagError, match=r"^flag --depth=0: must be an integer >= 1$"):
    cli.config_from_flags(Grown, _parse(Grown, "--depth=0"))


@pytest.mark.parametrize("name", STUDIES)
def test_every_study_config_round_trips_and_its_flags_show_help_and_default(name):
  study = _study(name)
  cfg = study.Config()
  assert study.Config.from_flat(cfg.to_flat()) == cfg
  fv = _parse(study.Config)
  assert cli.config_from_flags(study.Config, fv) == cfg  # the flags' defaults are the config's
  text = fv.module_help("experiment")
  specs = [s for s in config.flat_specs(study.Config) if s.flag]
  assert SHARED <= {s.flag for s in specs} | {"workdir", "overwrite"}
  for spec in specs:
    assert f"--{spec.flag}" in text or f"--[no]{spec.flag}" in text, spec.flag
    assert " ".join(spec.help.split()[:3]) in " ".join(text.split()), spec.flag
  assert text.count("(default:") >= len(specs)


BAD = [  # (study, flag, the flag the one line must name)
  ("fourier_phase", "--steps=0", "--steps"),
  ("fourier_phase", "--alpha=-1", "--alpha"),
  ("fourier_phase", "--shape=abc", "--shape"),
  ("fourier_phase", "--num_seeds=0", "--num_seeds"),
  ("fourier_phase", "--learning_rate=-1", "--learning_rate"),
  ("fourier_phase", "--tasks=edges", "--tasks"),
  ("fourier_phase", "--shape=4,4,4", "--shape"),
  ("fourier_phase", "--alpha=1,1.0", "--alpha"),
  ("fourier_phase", "--amplitude_alphas=1,1", "--amplitude_alphas"),
  ("fourier_phase", "--seed=-1", "--seed"),
  ("polymorphism", "--optimizer=rmsprop", "--optimizer"),
  ("polymorphism", "--num_seeds=1", "--num_seeds"),
  ("polymorphism", "--num_heads=3", "--num_heads"),
  ("polymorphism", "--sgd_momentum=1", "--sgd_momentum"),
  ("polymorphism", "--sae_top_k=300", "--sae_top_k"),
  ("polymorphism", "--num_null=5", "--num_null"),
  ("llc_dynamics", "--widths=3,0,3", "--widths"),
  ("llc_dynamics", "--llc_chains=0", "--llc_chains"),
  ("llc_dynamics", "--nbeta=-2", "--nbeta"),
  ("llc_dynamics", "--llc_batch_size=100000", "--llc_batch_size"),
  ("patterning_parens_probe", "--chi_step=300", "--chi_step"),
  ("patterning_parens", "--sgld_step_size=0", "--sgld_step_size"),
  ("patterning_induction", "--length=7", "--length"),
  ("patterning_induction", "--strength=1", "--strength"),
  ("tensor_similarity_backdoor", "--target_class=10", "--target_class"),
  ("tensor_similarity_grokking", "--weight_decays=0.1,0.1", "--weight_decays"),
]


@pytest.mark.parametrize("name,flag,named", BAD)
def test_a_bad_flag_is_refused_with_the_configs_own_message(name, flag, named):
  study = _study(name)
  argv = flag.split()  # the bad flag, after any flags it needs to be checked
  fv = _parse(study.Config, *argv)
  with pytest.raises(cli.FlagError) as refused:
    cli.config_from_flags(study.Config, fv)
  text = str(refused.value)
  assert named in text and "must" in text and "\n" not in text, text
  # The same check refuses the same value from Python, with the same words.
  values = dict(a[2:].partition("=")[::2] for a in argv)
  with pytest.raises(ConfigError) as py:
    study.Config().replace(**values)
  assert py.value.message in text


def test_llc_dynamics_keeps_zero_as_the_unset_nbeta():
  study = _study("llc_dynamics")
  assert cli.config_from_flags(study.Config, _parse(study.Config, "--nbeta=0")).sgld.nbeta is None
  assert cli.config_from_flags(study.Config, _parse(study.Config, "--nbeta=50")).sgld.nbeta == 50.0
