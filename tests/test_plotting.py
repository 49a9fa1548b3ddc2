"""The shared figure helpers."""

from mechjax import plotting


def test_save_writes_the_figure_closes_it_and_returns_its_path(tmp_path):
  fig, ax = plotting.plt.subplots()
  ax.plot([0, 1], [1, 0])
  path = str(tmp_path / "line.png")
  assert plotting.save(fig, path) == path
  assert (tmp_path / "line.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert not plotting.plt.fignum_exists(fig.number)
