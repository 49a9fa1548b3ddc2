"""The one base class of the errors a user's input causes.

:class:`InputError` is raised for a setting, a file or a folder that cannot be used as given: a
flag value, a checkpoint directory, a token file, a workdir, a mesh. Its message is one line that
names what was wrong and what is expected. The command line (:func:`mechjax.cli.execute`) prints
any ``InputError`` as that line alone and exits with status 2; every other exception is a defect
and keeps its traceback.

Each area has its own subclass, so that a caller can catch what it expects:
:class:`mechjax.config.ConfigError` (settings), :class:`mechjax.models.pretrained.CheckpointError`
(checkpoint directories), :class:`mechjax.data.tokens.CorpusError` (token files and text),
:class:`mechjax.studies.workdir.WorkdirError` (run folders) and
:class:`mechjax.train.distributed.SetupError` (multi-host settings).
"""

from __future__ import annotations


class InputError(ValueError):
  """An input that cannot be used as given; the message says what was wrong and what is
  expected, in one line."""
