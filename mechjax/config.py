"""Settings as frozen dataclasses: each setting is defined once, with its default, help text and
check.

A study's ``Config`` is such a dataclass, and its experiment's absl flags are generated from it
(:func:`mechjax.cli.define`). A setting added to the ``Config`` is therefore a flag, with
the same default, help and check, and a value that the check refuses raises the same
:class:`ConfigError` from ``Config(...)`` in Python as the one-line error the command line prints::

    @dataclasses.dataclass(frozen=True)
    class Config(config.Settings):
      run: config.RunSettings = config.group(config.RunSettings(steps=1000))
      width: int = config.setting(64, "Hidden units.", check=config.at_least(1))

      def validate(self):  # checks that involve several settings
        ...

Kinds of setting: ``int``, ``float``, ``bool``, ``str`` (``choices=`` makes it an enum),
``tuple[int | float | str, ...]`` (comma-separated on the command line; ``tuple[float, float]``
fixes the length), ``X | None`` (``unset=`` names the command-line value that means None), and
nested :class:`Settings` groups (:func:`group`). A group's settings become flags of their own names,
or of the names its ``flags=`` mapping gives them, so one concept has one name in code
(``cfg.sgld.num_chains``) while each experiment keeps its flag (``--chains``, ``--llc_chains``).

Every setting has a *flat key*: its flag name, or its dotted path (``sgld.mala``) when no flag
exposes it. :meth:`Settings.to_flat` and :meth:`Settings.from_flat` convert a config to and from the
flat dict that ``config.json`` holds, and :meth:`Settings.replace` overrides settings by flat key,
which is how tests shrink a study's one default config.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from typing import Any, Callable, Mapping, Sequence

from mechjax.errors import InputError

_META = "mechjax.config"
_MISSING = object()
REQUIRED = dataclasses.MISSING  # the default of a setting that has none (it must then come first)

Check = Callable[[Any], "str | None"]


class ConfigError(InputError):
  """A setting (or a combination of settings) has a value its check refuses.

  Attributes:
    names: the settings concerned (field names, dotted paths for nested ones, or flat keys).
    message: what is expected, e.g. ``"must be an integer >= 1"``.
    value: the refused value, when one setting is concerned.
  """

  def __init__(self, names: str | Sequence[str], message: str, value: Any = _MISSING):
    self.names = (names,) if isinstance(names, str) else tuple(names)
    self.message = message
    self.value = value
    if value is not _MISSING and len(self.names) == 1:
      text = f"{self.names[0]}={_show(value)}: {message}"
    else:
      text = f"{', '.join(self.names)}: {message}"
    super().__init__(text)

  def renamed(self, rename: Callable[[str], str]) -> ConfigError:
    return ConfigError([rename(n) for n in self.names], self.message, self.value)


def _show(value: Any) -> str:
  if isinstance(value, (tuple, list)):
    return ",".join(_show(v) for v in value)
  return repr(value) if isinstance(value, str) else str(value)


# ----------------------------------------------------------------------------------------------
# Declaring settings.


@dataclasses.dataclass(frozen=True)
class _Meta:
  help: str
  check: Check | None = None
  flag: str | None = None
  choices: tuple[str, ...] | None = None
  unset: Any = None
  group: bool = False
  flags: Mapping[str, str] | None = None


def setting(
  default: Any,
  help: str,
  *,
  check: Check | None = None,
  flag: str | None = None,  # noqa: A002
  choices: Sequence[str] | None = None,
  unset: Any = None,
) -> Any:
  """A dataclass field for one setting.

  Args:
    default: the default value (a list becomes a tuple), or :data:`REQUIRED`.
    help: the help text, shown by ``--help`` beside the default.
    check: ``check(value) -> None | str``: None when the value is acceptable, else what is expected,
      e.g. ``"must be an integer >= 1"`` (see :func:`at_least` and the other helpers here).
    flag: the flag's name when it differs from the field's (``alphas`` → ``--alpha``).
    choices: the accepted strings of a ``str`` (an enum flag) or ``tuple[str, ...]`` setting.
    unset: for an ``X | None`` setting, the command-line value that means None (e.g. ``0.0``).
  """
  if isinstance(default, list):
    default = tuple(default)
  meta = _Meta(help, check, flag, tuple(choices) if choices is not None else None, unset)
  if default is REQUIRED:
    return dataclasses.field(metadata={_META: meta})
  return dataclasses.field(default=default, metadata={_META: meta})


# noqa: A002
def group(default: Settings, *, help: str = "", flags: Mapping[str, str] | None = None) -> Any:
  """A dataclass field holding a nested :class:`Settings` group.

  ``flags`` maps the group's field names to this study's flag names; fields it leaves out are not
  flags (they keep the default given here, and can still be set from Python). ``None`` exposes every
  field under its own name (the shared :class:`RunSettings`).
  """
  return dataclasses.field(default=default, metadata={_META: _Meta(help, group=True, flags=flags)})


# ----------------------------------------------------------------------------------------------
# Checks: each returns None for an acceptable value, else the text of what is expected.


def at_least(lo: float) -> Check:
  def check(v):
    if v is None or not v >= lo:
      return (
        f"must be an integer >= {lo}"
        if isinstance(lo, int) and isinstance(v, int)
        else f"must be >= {lo}"
      )
    return None

  return check


def positive(v) -> str | None:
  return None if v is not None and math.isfinite(v) and v > 0 else "must be a finite number > 0"


def non_negative(v) -> str | None:
  return None if v is not None and math.isfinite(v) and v >= 0 else "must be a finite number >= 0"


def within(lo: float, hi: float, *, low_open: bool = True, high_open: bool = True) -> Check:
  """``lo < v < hi`` by default; ``low_open=False`` / ``high_open=False`` close either end."""
  text = f"must be in {'(' if low_open else '['}{lo:g}, {hi:g}{')' if high_open else ']'}"

  def check(v):
    above = v > lo if low_open else v >= lo
    below = v < hi if high_open else v <= hi
    return None if above and below else text

  return check


def even(v) -> str | None:
  return None if v % 2 == 0 else "must be even"


def one_of(choices: Sequence[str]) -> Check:
  return lambda v: None if v in choices else f"must be one of {', '.join(map(str, choices))}"


def non_empty(v) -> str | None:
  return None if len(v) else "must not be empty"


def distinct(v) -> str | None:
  return None if len(set(v)) == len(v) else "must not repeat a value"


def distinct_as(spec: str) -> Check:
  """Like :func:`distinct`, for values that are equal once written with the format ``spec`` (with
  ``"g"``, numbers equal to 6 significant digits), as when they name runs or files."""

  def check(v):
    return None if len({format(x, spec) for x in v}) == len(v) else "must not repeat a value"

  return check


def accepted_by(validate: Callable[[Any], Any], message: str) -> Check:
  """A check that refuses, with ``message``, every value on which ``validate`` (e.g. a library's
  own argument check) raises ``ValueError``."""

  def check(v):
    try:
      validate(v)
    except ValueError:
      return message
    return None

  return check


def each(item_check: Check) -> Check:
  """A check of every value of a list setting."""

  def check(values):
    for v in values:
      msg = item_check(v)
      if msg:
        return f"every value {msg} (got {_show(v)})"
    return None

  return check


def all_of(*checks: Check) -> Check:
  """The first refusal among ``checks``."""

  def check(v):
    for c in checks:
      msg = c(v)
      if msg:
        return msg
    return None

  return check


# ----------------------------------------------------------------------------------------------
# Types.


@dataclasses.dataclass(frozen=True)
class _Kind:
  base: type  # int, float, bool, str, tuple, or a Settings subclass
  item: type | None = None  # the item type of a tuple
  length: int | None = None  # a fixed tuple length
  optional: bool = False


@functools.lru_cache(maxsize=None)
def _kinds(cls: type) -> dict[str, _Kind]:
  hints = typing.get_type_hints(cls)
  return {f.name: _kind(hints[f.name], f"{cls.__name__}.{f.name}") for f in dataclasses.fields(cls)}


def _kind(tp, where: str) -> _Kind:
  optional = False
  if typing.get_origin(tp) in (typing.Union, types.UnionType):
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if len(args) != 1:
      raise TypeError(f"{where}: only X | None unions are settings; got {tp}")
    tp, optional = args[0], True
  if typing.get_origin(tp) is tuple:
    args = typing.get_args(tp)
    fixed = not (len(args) == 2 and args[1] is Ellipsis)
    item = args[0]
    if item not in (int, float, str) or (fixed and any(a is not item for a in args)):
      raise TypeError(f"{where}: tuple settings hold ints, floats or strings of one type; got {tp}")
    return _Kind(tuple, item, len(args) if fixed else None, optional)
  if tp in (int, float, bool, str) or (isinstance(tp, type) and issubclass(tp, Settings)):
    return _Kind(tp, optional=optional)
  raise TypeError(f"{where}: unsupported setting type {tp}")


def _coerce_scalar(tp: type, v: Any) -> Any:
  """``v`` as ``tp``, or raises ValueError. Strings are parsed (command-line and old config
  values)."""
  if tp is bool:
    if isinstance(v, bool) or type(v).__name__ == "bool_":
      return bool(v)
    raise ValueError("must be true or false")
  if tp is str:
    if isinstance(v, str):
      return v
    raise ValueError("must be a string")
  if isinstance(v, bool):
    raise ValueError("must be a number" if tp is float else "must be an integer")
  if tp is int:
    if isinstance(v, str):
      try:
        return int(v.strip())
      except ValueError:
        raise ValueError("must be an integer") from None
    if isinstance(v, int) or type(v).__name__.startswith("int"):
      return int(v)
    if isinstance(v, float) and v.is_integer():
      return int(v)
    raise ValueError("must be an integer")
  try:
    return float(v.strip() if isinstance(v, str) else v)
  except (TypeError, ValueError):
    raise ValueError("must be a number") from None


def _coerce(kind: _Kind, v: Any) -> Any:
  if v is None:
    if kind.optional:
      return None
    raise ValueError("must be set (None is not accepted)")
  if kind.base is not tuple:
    return _coerce_scalar(kind.base, v)
  if isinstance(v, str):
    v = [s for s in v.split(",") if s.strip()] if v.strip() else []
  if not isinstance(v, (list, tuple)) and not hasattr(v, "tolist"):
    v = [v]
  name = {int: "integers", float: "numbers", str: "strings"}[kind.item]
  try:
    out = tuple(_coerce_scalar(kind.item, x) for x in (v.tolist() if hasattr(v, "tolist") else v))
  except ValueError:
    raise ValueError(f"must be a comma-separated list of {name}") from None
  if kind.length is not None and len(out) != kind.length:
    raise ValueError(f"must be exactly {kind.length} {name}, comma-separated")
  return out


# ----------------------------------------------------------------------------------------------
# The base class.


class Settings:
  """Base of every settings dataclass (decorate subclasses with
  ``@dataclasses.dataclass(frozen=True)``).

  On construction each field is converted to its declared type (lists become tuples, ints become
  floats where a float is declared) and checked; then :meth:`validate` checks combinations. Any
  refusal is a :class:`ConfigError` that names the setting and what it accepts.

  A subclass's docstring gets an ``Attributes:`` section written from its settings' help texts, so
  the help is written once, for ``--help`` and for ``help()`` alike.
  """

  def __init_subclass__(cls, **kwargs):
    super().__init_subclass__(**kwargs)
    lines = []
    for name in cls.__dict__.get("__annotations__", {}):
      f = cls.__dict__.get(name)
      meta = f.metadata.get(_META) if isinstance(f, dataclasses.Field) else None
      if meta is None:
        continue
      text = meta.help or (f"the {type(f.default).__name__} group" if meta.group else "")
      lines.append(f"    {name}: {' '.join(text.split())}")
    doc = cls.__doc__ or f"The settings of {cls.__module__}."
    if lines and "Attributes:" not in doc:
      cls.__doc__ = doc.rstrip() + "\n\n  Attributes:\n" + "\n".join(lines) + "\n  "

  def __post_init__(self):
    kinds = _kinds(type(self))
    for f in dataclasses.fields(self):
      kind, value = kinds[f.name], getattr(self, f.name)
      meta = f.metadata.get(_META)
      if isinstance(kind.base, type) and issubclass(kind.base, Settings):
        if not isinstance(value, kind.base):
          raise ConfigError(f.name, f"must be a {kind.base.__name__}", value)
        continue
      try:
        value = _coerce(kind, value)
      except ValueError as e:
        raise ConfigError(f.name, str(e), value) from None
      object.__setattr__(self, f.name, value)
      if meta is None or value is None:
        continue
      checks = [meta.check] if meta.check else []
      if meta.choices is not None:
        checks.insert(0, each(one_of(meta.choices)) if kind.base is tuple else one_of(meta.choices))
      for check in checks:
        msg = check(value)
        if msg:
          raise ConfigError(f.name, msg, value)
    self.validate()

  def validate(self) -> None:
    """Checks that involve several settings; raise :class:`ConfigError` naming them."""

  def check_at_most(self, names: Sequence[str], limit: str) -> None:
    """Refuses any of the settings ``names`` (dotted paths, ``"sgld.batch_size"``) above the
    setting ``limit`` (``"n"``), with a one-line error naming them all and their values."""
    get = lambda name: functools.reduce(getattr, name.split("."), self)
    if any(get(name) > get(limit) for name in names):
      shown = ", ".join(f"{name}={get(name)}" for name in names)
      raise ConfigError((*names, limit), f"{shown} must not exceed {limit}={get(limit)}")

  # --- flat keys
  # ----------------------------------------------------------------------------------------------

  def to_flat(self) -> dict[str, Any]:
    """``{flat key: value}`` for every setting (tuples as lists): what ``config.json`` holds."""
    out = {}
    for spec in flat_specs(type(self)):
      value = self
      for name in spec.path:
        value = getattr(value, name)
      out[spec.key] = list(value) if isinstance(value, tuple) else value
    return out

  @classmethod
  def from_flat(cls, values: Mapping[str, Any], base: Settings | None = None):
    """A config from flat keys (flag names or dotted paths); settings not named keep ``base``'s
    values (the defaults when ``base`` is None). A :class:`ConfigError` names settings by flat
    key."""
    base = cls() if base is None else base
    specs = {s.key: s for s in flat_specs(cls)}
    unknown = sorted(set(values) - set(specs))
    if unknown:
      raise ConfigError(
        unknown, f"not a setting of {cls.__name__}; the settings are {', '.join(specs)}"
      )
    return _rebuild(cls, cls, base, {specs[k].path: v for k, v in values.items()}, ())

  def replace(self, **flat: Any):
    """This config with the settings named by flat key (flag names) changed, e.g.
    ``Config().replace(steps=200, num_seeds=2)``."""
    return type(self).from_flat(flat, base=self)


def _rebuild(
  root: type,
  cls: type,
  base: Settings,
  overrides: dict[tuple[str, ...], Any],
  prefix: tuple[str, ...],
):
  """``base`` (a ``cls`` at ``prefix`` inside a ``root`` config) with ``overrides`` (keyed by path
  from the root) applied, nested groups rebuilt first. Errors name settings by their flat keys in
  ``root``."""
  kinds = _kinds(cls)
  changes = {}
  for f in dataclasses.fields(cls):
    kind = kinds[f.name]
    path = (*prefix, f.name)
    if isinstance(kind.base, type) and issubclass(kind.base, Settings):
      inner = {p: v for p, v in overrides.items() if p[: len(path)] == path}
      if inner:
        changes[f.name] = _rebuild(root, kind.base, getattr(base, f.name), inner, path)
    elif path in overrides:
      changes[f.name] = overrides[path]
  if not changes:
    return base
  try:
    return dataclasses.replace(base, **changes)
  except ConfigError as e:
    raise e.renamed(lambda n: flat_key(root, (*prefix, *n.split(".")))) from None


@dataclasses.dataclass(frozen=True)
class FlatSpec:
  """One setting of a (possibly nested) config: where it lives and how the command line names it."""

  key: str  # the flag name, or the dotted path when no flag exposes it
  path: tuple[str, ...]  # field names from the root config
  flag: str | None
  help: str
  kind: _Kind
  default: Any
  choices: tuple[str, ...] | None
  unset: Any


def _field_default(f: dataclasses.Field) -> Any:
  if f.default is not dataclasses.MISSING:
    return f.default
  if f.default_factory is not dataclasses.MISSING:
    return f.default_factory()
  return REQUIRED


@functools.lru_cache(maxsize=None)
def flat_specs(cls: type) -> tuple[FlatSpec, ...]:
  """Every setting of ``cls``, nested groups expanded, in field order; a setting with no default
  (:data:`REQUIRED`) has that as its spec's default."""
  out = []
  try:
    default = cls()
  except TypeError:  # a setting without a default: each field's own default is read instead
    default = None

  def walk(c, inst, prefix, exposed):
    kinds = _kinds(c)
    for f in dataclasses.fields(c):
      meta = f.metadata.get(_META) or _Meta("")
      kind, path = kinds[f.name], (*prefix, f.name)
      value = getattr(inst, f.name) if inst is not None else _field_default(f)
      if isinstance(kind.base, type) and issubclass(kind.base, Settings):
        mapping = meta.flags
        walk(kind.base, value, path, (lambda n, m=mapping: n if m is None else m.get(n)))
        continue
      flag = exposed(f.name)
      if flag is not None and meta.flag:
        flag = meta.flag
      out.append(
        FlatSpec(
          flag or ".".join(path), path, flag, meta.help, kind, value, meta.choices, meta.unset
        )
      )

  walk(cls, default, (), lambda n: n)
  keys = [s.key for s in out]
  dup = sorted({k for k in keys if keys.count(k) > 1})
  if dup:
    raise TypeError(f"{cls.__name__}: several settings share the flag name(s) {dup}")
  return tuple(out)


def flat_key(cls: type, path: str | Sequence[str]) -> str:
  """The flat key (flag name, or dotted path) of the setting at ``path`` (``"sgld.num_chains"``)."""
  path = tuple(path.split(".")) if isinstance(path, str) else tuple(path)
  for spec in flat_specs(cls):
    if spec.path == path:
      return spec.key
  return ".".join(path)


def normalise_flat(cls: type, key: str, value: Any) -> Any:
  """``value`` of flat key ``key`` converted to its setting's type, as :meth:`Settings.to_flat`
  writes it (so that a ``config.json`` written with other types, e.g. strings, compares equal);
  unchanged when it cannot be converted."""
  for spec in flat_specs(cls):
    if spec.key == key:
      try:
        v = _coerce(spec.kind, value)
      except ValueError:
        return value
      return list(v) if isinstance(v, tuple) else v
  return value


# ----------------------------------------------------------------------------------------------
# The run settings every study shares.


@dataclasses.dataclass(frozen=True)
class RunSettings(Settings):
  """How long and how many: the shared flags ``--seed --num_seeds --steps --checkpoint_every
  --log_every``."""

  seed: int = setting(
    0,
    "Base random seed; seed i of the vmapped run uses fold_in(PRNGKey(seed), i).",
    check=at_least(0),
  )
  num_seeds: int = setting(
    4, "Independent seeds trained together in one vmapped program.", check=at_least(1)
  )
  steps: int = setting(1000, "Optimizer steps per run.", check=at_least(1))
  checkpoint_every: int = setting(
    1000, "Save a checkpoint every this many steps.", check=at_least(1)
  )
  log_every: int = setting(
    100, "Write metrics and a progress line every this many steps.", check=at_least(1)
  )

  def check_checkpoint(self, name: str, step: int) -> None:
    """Refuses a setting ``name`` (of the config holding these run settings as ``run``) whose
    ``step`` is not one the run checkpoints: a multiple of ``checkpoint_every``, at most
    ``steps``."""
    if step > self.steps or step % self.checkpoint_every:
      raise ConfigError(
        (name, "run.steps", "run.checkpoint_every"),
        f"{name}={step} must be a checkpoint of the run: a multiple of "
        f"checkpoint_every={self.checkpoint_every} and at most steps={self.steps}",
      )
